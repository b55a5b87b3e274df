"""Stage ``sft_dataset``: the SFT refiner's training set, by rejection sampling (docs/scoring.md, "SFT refiner").

The workflow samples ``samples_per_prompt`` second-turn completions of every refinement prompt of
``refine_dataset`` with the base model (the ``inference`` stage in its ``--refinements`` mode, as the
evaluation's refinement runs) and executes them (the ``execute`` stage on the BARC tasks). This stage keeps
the completions that solved their task, once per program and at most ``max_per_task`` per task
(:mod:`arc_pipeline.rejection_sampling`), and writes them as prompt-completion pairs
(``SFT_DATASET_SCHEMA``) plus a summary json of the counts, among them how many prompts gave a success.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.io import InputFileError, read_frame, write_table, write_text
from arc_pipeline.rejection_sampling import SelectionInputError, select_solutions
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA, SFT_DATASET_SCHEMA

log = logging.getLogger(__name__)

REFINEMENT_COLUMNS = ("task_id", "prediction_id", "prompt", "prompt_tokens")
PREDICTION_COLUMNS = (
    "prediction_id",
    "task_id",
    "parent_prediction_id",
    "text",
    "finish_reason",
    "completion_tokens",
)
EXECUTION_COLUMNS = ("prediction_id", "train_is_correct", "test_is_correct")


class SftDatasetConfig(BaseModel):
    """How the SFT refiner's training set is sampled and filtered (the workflow's ``sft_dataset`` section)."""

    model_config = ConfigDict(extra="forbid")

    samples_per_prompt: PositiveInt = Field(
        8,
        description="second-turn completions the base model samples per refinement prompt (the workflow runs "
        "the inference stage with n = this, over `inference`'s sampling settings); read by the workflow",
    )
    shards: PositiveInt = Field(
        1,
        description="GPU jobs the SFT sampling is split into (contiguous blocks of the refinement prompts, like "
        "inference.shards); read by the workflow",
    )
    max_per_task: PositiveInt = Field(
        4, description="solving completions kept per task at most (distinct programs, in prediction id order)"
    )
    keep: Literal["solved", "failed"] = Field(
        "solved",
        description="which completions become SFT data: those that solved their task; 'failed' (every other "
        "one) exists for the canary's mutation run only (docs/canary.md), which must fail the SFT check",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--refinements", type=Path, required=True, help="refinement prompts (REFINEMENT_SCHEMA)")
    parser.add_argument("--predictions", type=Path, required=True, help="their sampled completions (predictions)")
    parser.add_argument("--executions", type=Path, required=True, help="the completions' executions parquet")
    parser.add_argument("--output", type=Path, required=True, help="SFT dataset parquet (SFT_DATASET_SCHEMA)")
    parser.add_argument("--summary", type=Path, required=True, help="counts json (prompts with a success, ...)")
    add_config_argument(parser)


def _read(path: Path, schema, columns: tuple[str, ...]):
    import pyarrow as pa

    return read_frame(path, pa.schema([schema.field(name) for name in columns]))


def run(args: argparse.Namespace) -> int:
    config = parse_config(args, SftDatasetConfig)
    refinements = _read(args.refinements, REFINEMENT_SCHEMA, REFINEMENT_COLUMNS)
    predictions = _read(args.predictions, PREDICTIONS_SCHEMA, PREDICTION_COLUMNS)
    executions = _read(args.executions, EXECUTIONS_SCHEMA, EXECUTION_COLUMNS)
    try:
        rows, counts = select_solutions(
            refinements, predictions, executions, config.max_per_task, keep_failed=config.keep == "failed"
        )
    except SelectionInputError as error:
        # the message starts with the table's role: name the file behind it
        role = str(error).split(":", 1)[0]
        path = {"refinements": args.refinements, "predictions": args.predictions}.get(role, args.executions)
        raise InputFileError(f"{path}: {error}") from None
    summary = counts.as_dict()
    log.info("sft dataset: %s", ", ".join(f"{key} {value}" for key, value in summary.items()))
    if not counts.kept:
        log.warning("no sampled completion solved its task: the SFT dataset is empty")
    write_table(rows, args.output, SFT_DATASET_SCHEMA)
    write_text(json.dumps({**summary, "config": config.model_dump(mode="json")}, indent=2) + "\n", args.summary)
    return 0
