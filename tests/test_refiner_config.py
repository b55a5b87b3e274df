"""The evaluation's refiners in the workflow config (WorkflowConfig): unique names, SFT then RL beside RL alone, and
the search's schedules and refiners."""

from __future__ import annotations

from pathlib import Path

import pytest

from arc_pipeline.config.errors import ConfigError
from arc_pipeline.config.prepare import deep_merge, load_base, validate

REPO = Path(__file__).resolve().parents[1]


def with_changes(change: dict) -> dict:
    return deep_merge(validate(load_base("default", REPO)).model_dump(mode="json"), change)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sft": {"compare_sft_then_rl": True}}, "needs sft.enabled"),
        (
            {"sft": {"enabled": True, "compare_sft_then_rl": True}, "train": {"init_adapter": "sft"}},
            "init_adapter none",
        ),
        ({"sft": {"enabled": True}, "evaluate": {"extra_adapters": {"sft": "."}}}, "workflow's own refiners"),
        ({"evaluate": {"extra_adapters": {"rl": "."}}}, "workflow's own refiners"),
        (
            {"sft": {"enabled": True, "compare_sft_then_rl": True}, "train": {"backend": "unsloth", "use_cpu": False}},
            "backend trl",
        ),
        # the embedded default: n_eval 8, inference.n 4
        (
            {"evaluate": {"search": {"enabled": True, "schedules": [[4, 4], [4, 4, 4]]}}},
            r"spends 12 predictions per task, more than evaluate.n_eval 8",
        ),
        (
            {"evaluate": {"search": {"enabled": True, "schedules": [[2, 6]]}}},
            r"rounds \[6\] .* multiples of inference.n 4",
        ),
        ({"evaluate": {"search": {"enabled": True, "schedules": [[2]]}}}, "no refinement round"),
        ({"evaluate": {"search": {"enabled": True, "refiners": ["sft"]}}}, r"\['sft'\] are not evaluated refiners"),
    ],
)
def test_refused(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(with_changes(change))


def test_the_comparison_and_an_extra_adapter_named_sft_while_sft_is_off() -> None:
    config = validate(with_changes({"sft": {"enabled": True, "compare_sft_then_rl": True}}))
    assert config.sft.compare_sft_then_rl and config.train.init_adapter == "none"
    assert validate(with_changes({"evaluate": {"extra_adapters": {"sft": "."}}})).evaluate.extra_adapters == {
        "sft": "."
    }


def test_the_search_runs_for_the_refiners_it_names_in_the_evaluations_order() -> None:
    search = {"enabled": True, "schedules": [[4, 4]], "refiners": ["extra", "base"]}
    config = validate(with_changes({"evaluate": {"search": search, "extra_adapters": {"extra": "."}}}))
    assert config.searching_refiners() == ["base", "extra"]
    everyone = validate(
        with_changes({"evaluate": {"search": {**search, "refiners": []}, "extra_adapters": {"extra": "."}}})
    )
    assert everyone.searching_refiners() == ["base", "rl", "extra"]
    assert validate(with_changes({})).searching_refiners() == []  # off in the embedded default
