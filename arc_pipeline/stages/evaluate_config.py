"""The ``evaluate`` config section: the evaluation's own settings, and those of its inference and
execute jobs, which rules/evaluate.smk merges over the ``inference`` and ``execute`` sections."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from arc_pipeline.generation.engine import KvCacheDtype
from arc_pipeline.stages.merge_adapter import MergeAdapterConfig


class EvaluationExecution(BaseModel):
    """``evaluate.execute``: the ``execute`` settings the evaluation's execute jobs change
    (rules/evaluate.smk merges them over ``execute``; unset = as in ``execute``). One slice for
    the baseline and the refinements: a refinement run holds the baseline's first half, executed once."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float | None = Field(
        None,
        gt=0,
        description="time limit of one program on all its inputs (the published evaluation's initial predictions: 5 s)",
    )
    memory_mb: int | None = Field(None, gt=0, description="memory limit of one program in MiB")
    rules: Literal["strict", "published"] | None = Field(None, description="execution rules (see execute.rules)")


class EvaluationEngine(BaseModel):
    """``evaluate.engine``: the vLLM settings the evaluation's inference jobs (baseline and refinements) change
    (rules/evaluate.smk merges them over ``inference``; unset = as in ``inference``)."""

    model_config = ConfigDict(extra="forbid")

    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="share of GPU memory vLLM may take (see inference.gpu_memory_utilization)"
    )
    max_num_seqs: int | None = Field(
        None, ge=1, description="sequences decoded at once (see inference.max_num_seqs); unset = as in inference"
    )
    kv_cache_dtype: KvCacheDtype | None = Field(
        None, description="KV cache storage (see inference.kv_cache_dtype; fp8 changes what is sampled)"
    )
    cascade_attention: bool | None = Field(None, description="vLLM 0.31's cascade attention (see inference)")


class SearchConfig(BaseModel):
    """``evaluate.search``: test-time search in rounds (docs/scoring.md, "Search in rounds"). Each schedule spends
    a budget of predictions per task: its first number independent predictions (the baseline's first ones), then
    one refinement round per further number, each refining the best wrong programs found so far by that refiner."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="run the search for every evaluated refiner (its rules and tables)")
    schedules: list[list[PositiveInt]] = Field(
        default_factory=lambda: [[64, 64], [32, 32, 32, 32]],
        description="predictions per task of each schedule: independent ones, then each round's refinements (a "
        "multiple of inference.n: prompts = round / n). A schedule's total may not pass evaluate.n_eval, which "
        "gives independent sampling the same budget. [64, 64] is the one-round table's own run",
    )
    refiners: list[str] = Field(
        default_factory=list,
        description="the refiners that search (base, rl, sft, sft_rl, extra adapters); empty = every evaluated one",
    )
    parents: Literal["best_wrong", "best_unrefined", "random"] = Field(
        "best_wrong",
        description="which earlier programs a round refines: best_wrong (docs/scoring.md's selection over every "
        "program the refiner has made so far), best_unrefined (the same, with the programs an earlier round "
        "refined put last: a round repeats an earlier prompt only when nothing new is left), or random (any "
        "earlier program with code: a mutation the canary's search check must fail)",
    )
    feedback: bool = Field(
        True,
        description="the prompts show the earlier program's execution outputs and feedback; false leaves them out "
        "(a mutation the canary's search check must fail)",
    )
    seed: int = Field(0, description="seed of the random parents (parents: random)")

    @field_validator("schedules")
    @classmethod
    def _rounds(cls, schedules: list[list[int]]) -> list[list[int]]:
        for schedule in schedules:
            if len(schedule) < 2:
                raise ValueError(
                    f"schedule {schedule} has no refinement round: give independent predictions, then rounds"
                )
        names = [schedule_name(schedule) for schedule in schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"schedules repeat: {names}")
        return schedules

    @property
    def mutated(self) -> bool:
        """A mutation of the search is on (its rounds are never the one-round table's run). best_unrefined is
        not one: nothing is refined before round 1, so its round 1 is the one-round table's run."""
        return self.parents == "random" or not self.feedback


def schedule_name(schedule: list[int]) -> str:
    """The schedule's folder name under evaluate/search: its numbers joined by '+' (64+64, 32+32+32+32)."""
    return "+".join(str(number) for number in schedule)


class EvaluateConfig(BaseModel):
    """The ARC-AGI evaluation: a baseline of n_eval predictions per task against its first half plus refinements."""

    model_config = ConfigDict(extra="forbid")

    n_eval: int = Field(
        128, ge=2, description="baseline predictions per task; refinement runs use the first n_eval / 2 of them"
    )
    shards: int = Field(
        1,
        ge=1,
        description="GPU jobs the baseline inference is split into (like inference.shards "
        "for BARC parts): a killed run redoes only its unfinished shards",
    )
    refinement_prompts: int = Field(8, ge=1, description="refinement prompts per task (used by refine-prompts)")
    extra_adapters: dict[str, str] = Field(
        default_factory=dict, description="name: adapter folder, evaluated like the trained adapter"
    )
    compare_with_published: bool = Field(
        False,
        description="also write the table beside the published "
        "results (docs/defaults.md); for the published preset only",
    )
    refinement_max_model_len: int | None = Field(
        None,
        gt=0,
        description="vLLM context length of the refinement inference runs; refine-prompts drops "
        "prompts longer than it minus inference.max_tokens (counted in runs.md). None = inference.max_model_len. "
        "Published refinement evaluation: 14,500 (no prompt dropped)",
    )
    execute: EvaluationExecution = Field(
        default_factory=EvaluationExecution, description="execution settings of the evaluation runs"
    )
    engine: EvaluationEngine = Field(
        default_factory=EvaluationEngine, description="vLLM settings of the evaluation's inference runs"
    )
    merge_adapter: bool = Field(
        False,
        description="refine with each adapter merged into the base weights (rule merge_adapter, once per "
        "adapter) instead of base + LoRA in vLLM: the base model's speed (LoRA costs 2.3-3.5x), but weights "
        "rounded to the base's dtype, which loses adapter updates smaller than half a bf16 step of a weight "
        "(the merge logs how much). Off: the adapter runs as it was trained (docs/defaults.md)",
    )
    merge: MergeAdapterConfig = Field(
        default_factory=MergeAdapterConfig, description="stage merge_adapter (with merge_adapter on)"
    )
    search: SearchConfig = Field(
        default_factory=SearchConfig, description="test-time search in rounds (off in the embedded default)"
    )

    @property
    def first_predictions(self) -> int:
        """Baseline predictions per task a refinement run starts from (the first half); refine-prompts gets it
        from the workflow, so the two stages cannot disagree."""
        return self.n_eval // 2
