"""docs/config-reference.md is what the stage models' field descriptions render to (never stale)."""

from __future__ import annotations

from pathlib import Path

from arc_pipeline.config_check import SECTION_MODELS, load_model
from arc_pipeline.config_reference import render

REPO = Path(__file__).resolve().parents[1]


def test_committed_reference_is_up_to_date() -> None:
    committed = (REPO / "docs" / "config-reference.md").read_text()
    assert committed == render(), "regenerate: arc-pipeline config-reference --output docs/config-reference.md"


def test_every_field_of_every_section_is_listed() -> None:
    text = render()
    for keys, spec in SECTION_MODELS.items():
        assert f"## `{'.'.join(keys)}`" in text
        for name in load_model(spec).model_fields:
            assert f"| `{name}` |" in text
