"""Check every section of the workflow config against the owning stage's pydantic model.

Called from ``rules/common.smk`` when Snakemake parses the workflow, so a malformed config fails
before any job starts, with the section and field named. Stage modules keep heavy imports (torch,
vLLM) inside functions, so importing them here is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ValidationError

from arc_pipeline.config_args import check_unknown_fields
from arc_pipeline.errors import PipelineError

# config section (path of keys) -> "module:Model" of the stage that consumes it
SECTION_MODELS: dict[tuple[str, ...], str] = {
    ("barc", "download"): "arc_pipeline.stages.barc_download:BarcDownloadConfig",
    ("barc", "tasks"): "arc_pipeline.stages.barc_tasks:BarcTasksConfig",
    ("barc", "split"): "arc_pipeline.stages.barc_split:BarcSplitConfig",
    ("arc",): "arc_pipeline.stages.arc_tasks:ArcTasksConfig",
    ("model",): "arc_pipeline.stages.model:ModelStageConfig",
    ("execution",): "arc_pipeline.stages.execute:ExecuteConfig",
    ("inference",): "arc_pipeline.stages.inference:InferenceConfig",
    ("evaluation",): "arc_pipeline.stages.evaluate:EvaluateConfig",
    ("refinement",): "arc_pipeline.stages.refine_dataset:RefineDatasetConfig",
    ("training",): "arc_pipeline.training.config:TrainConfig",
}


class ConfigError(PipelineError, ValueError):
    """A config section its stage's model rejects; the message names the section and the field."""


def load_model(spec: str):
    module_name, class_name = spec.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def check_config(config: dict[str, Any]) -> None:
    for keys, spec in SECTION_MODELS.items():
        value: Any = config
        for key in keys:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        name = ".".join(keys)
        model = load_model(spec)
        try:
            check_unknown_fields(value, model, name)
            model.model_validate(value)
        except (ValidationError, ValueError) as error:
            raise ConfigError(f"invalid config section '{name}':\n{error}") from None
