"""One config contract: the committed reference and JSON schema are what the models render, and the schema
accepts exactly what the models accept."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from arc_pipeline.config.prepare import load_base, validate
from arc_pipeline.config.reference import REFERENCE_PATH, REGENERATE, SCHEMA_PATH, render, render_schema, schema
from arc_pipeline.config.workflow import WorkflowConfig

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (REPO / "config").glob("*.yaml"))


def test_committed_reference_is_up_to_date() -> None:
    assert (REPO / REFERENCE_PATH).read_text() == render(), f"regenerate: {REGENERATE}"


def test_committed_schema_is_up_to_date() -> None:
    assert (REPO / SCHEMA_PATH).read_text() == render_schema(), f"regenerate: {REGENERATE}"


def _fields(model, prefix=""):
    for name, field in model.model_fields.items():
        yield f"{prefix}{name}", field
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            yield from _fields(annotation, f"{prefix}{name}.")


def test_every_field_is_described_in_the_reference_and_the_schema() -> None:
    text, generated = render(), schema()
    for path, field in _fields(WorkflowConfig):
        assert field.description, f"{path} has no description"
        node = generated
        for key in path.split("."):
            node = node["properties"][key]
        assert node.get("description") == field.description, path
    for name in WorkflowConfig.model_fields:
        assert f"| `{name}` |" in text


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_passes_both_checks(preset: str) -> None:
    complete = validate(load_base(preset if preset != "config" else "default", REPO)).model_dump(mode="json")
    jsonschema.validate(complete, schema())


@pytest.mark.parametrize(
    "change",
    [
        {"train": {"learning_rat": 1.0}},  # unknown field
        {"execute": {"memory_mb": 32}},  # below the minimum
        {"evaluate": {"execute": {"rules": "lenient"}}},  # not one of the choices
        {"inference": {"max_model_len": "long"}},  # wrong type
        {"cluster": {"gpu": {"threads": 0}}},
    ],
)
def test_the_schema_and_the_models_refuse_the_same_values(change: dict) -> None:
    from arc_pipeline.config.errors import ConfigError
    from arc_pipeline.config.prepare import deep_merge

    bad = deep_merge(validate(load_base("default", REPO)).model_dump(mode="json"), change)
    with pytest.raises(ConfigError):
        validate(bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


def test_every_section_refuses_unknown_keys() -> None:
    """A typo must fail, never fall back to a default: every model under WorkflowConfig forbids extra keys."""

    def models(model):
        yield model
        for field in model.model_fields.values():
            if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
                yield from models(field.annotation)

    lenient = [m.__name__ for m in models(WorkflowConfig) if m.model_config.get("extra") != "forbid"]
    assert lenient == []
