"""The inference settings of the evaluation's jobs, from the typed config: one definition for rules/evaluate.smk
(its jobs' params) and for benchmarks/merged_vs_lora.py (which reruns a finished run's refinement inference)."""

from __future__ import annotations

from typing import Any

from arc_pipeline.config.workflow import WorkflowConfig


def evaluation_engine(workflow: WorkflowConfig) -> dict[str, Any]:
    """``inference`` with the evaluation's own vLLM settings (``evaluate.engine``, the fields set) over it."""
    own = {key: value for key, value in workflow.evaluate.engine.model_dump(mode="json").items() if value is not None}
    return {**workflow.inference.model_dump(mode="json"), **own}


def refinement_inference(workflow: WorkflowConfig) -> dict[str, Any]:
    """The refinement runs' settings: ``evaluation_engine`` with the evaluation's own context length
    (``evaluate.refinement_max_model_len``, where set)."""
    own = workflow.evaluate.refinement_max_model_len
    return {**evaluation_engine(workflow), **({"max_model_len": own} if own is not None else {})}
