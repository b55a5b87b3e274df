"""``arc-pipeline inference``: sample predictions with vLLM (docs/prompts.md and docs/defaults.md).

Two modes, one engine and one output schema (``PREDICTIONS_SCHEMA``):

- ``--tasks TASKS.parquet``: first turn. Each task gets ``n_predictions / n`` rounds; a round is a
  fresh augmentation, a shuffled train order and a random test input (drawn from an rng seeded by
  ``(seed, task_id, turn, round)``, so a shard reproduces whatever other tasks it holds), rendered with
  the model's own chat template and sampled ``n`` times.
- ``--refinements REFINE.parquet``: second turn. Each row's already-rendered prompt is sampled ``n``
  times; turn 2, the row's augmentation, ``parent_prediction_id`` = the refined prediction, and
  ``round`` counting the task's rows in file order.

All prompts of a shard go to vLLM in one call (best batching; prefix caching shares each prompt
between its n samples). Prompts longer than ``max_model_len - max_tokens`` are skipped and logged.
The output is written once, atomically, at the end: a shard killed half way leaves no file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, model_validator

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.generation.engine import Engine, EngineConfig, EngineOptions, SamplingConfig
from arc_pipeline.generation.requests import (
    FIRST_TURN,
    REFINEMENT_TURN,
    Provenance,
    Request,
    first_turn_requests,
    n_rounds,
    prediction_rows,
    refinement_requests,
)
from arc_pipeline.io import InputFileError, read_frame, write_table
from arc_pipeline.schemas import PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA
from arc_pipeline.task_files import read_tasks

log = logging.getLogger(__name__)


class InferenceConfig(SamplingConfig, EngineOptions):
    """The ``inference`` config slice: sampling and engine settings plus the rounds.

    ``seed`` (shared by both parents) seeds the rounds' random choices, the per-request sampling
    seeds and the engine; ``seed: null`` leaves sampling unseeded (faster on GPU, not reproducible)
    while the rounds still use seed 0.
    """

    n_predictions: int = Field(8, ge=1, description="predictions per task (first turn): a multiple of n")
    shards: int = Field(1, ge=1, description="GPU jobs per tasks file: read by the workflow's shard rule, not here")
    turn: int | None = Field(
        None, ge=1, le=127, description="turn recorded in the rows; default 1 with --tasks, 2 with --refinements"
    )

    @model_validator(mode="after")
    def _whole_rounds(self) -> InferenceConfig:
        n_rounds(self.n_predictions, self.n)  # raises if n_predictions is not a multiple of n
        return self

    def sampling(self) -> SamplingConfig:
        return SamplingConfig.model_validate({name: getattr(self, name) for name in SamplingConfig.model_fields})

    def engine(self, model: str, adapter: str | None) -> EngineConfig:
        options = {name: getattr(self, name) for name in EngineOptions.model_fields}
        options["seed"] = self.seed or 0  # seed null = unseeded sampling; the engine still needs one
        return EngineConfig(model=model, lora_path=adapter, **options)


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--tasks", type=Path, help="tasks parquet (TASKS_SCHEMA): first-turn predictions")
    source.add_argument("--refinements", type=Path, help="refinement prompts (REFINEMENT_SCHEMA): second turn")
    parser.add_argument("--model", type=Path, required=True, help="model folder (from the model stage)")
    parser.add_argument("--adapter", type=Path, help="LoRA adapter folder to apply")
    parser.add_argument("--output", type=Path, required=True, help="predictions parquet to write")
    add_config_argument(parser)


def build_requests(args: argparse.Namespace, config: InferenceConfig) -> list[Request]:
    """All prompts of the shard, rendered before the engine starts (bad input fails fast)."""
    if args.tasks is not None:
        from arc_pipeline.models.folder import load_tokenizer

        turn = config.turn or FIRST_TURN
        rounds = n_rounds(config.n_predictions, config.n)
        tasks = read_tasks(args.tasks)
        tokenizer = load_tokenizer(args.model)
        log.info("%s: %d tasks x %d rounds x n=%d", args.tasks, len(tasks), rounds, config.n)
        return first_turn_requests(tasks, tokenizer, config.seed or 0, rounds, turn)
    turn = config.turn or REFINEMENT_TURN
    frame = read_frame(args.refinements, REFINEMENT_SCHEMA)
    log.info("%s: %d refinement prompts x n=%d", args.refinements, frame.height, config.n)
    try:
        return refinement_requests(frame, turn)
    except ValueError as error:
        raise InputFileError(f"{args.refinements}: {error}") from None


def predict(
    engine: Engine, requests: Sequence[Request], sampling: SamplingConfig, provenance: Provenance
) -> tuple[list[dict], list[Request]]:
    """Sample every request; returns the prediction rows and the requests skipped as too long."""
    generations = engine.generate([r.prompt for r in requests], sampling, keys=[r.key for r in requests])
    rows = prediction_rows(requests, generations, provenance)
    skipped = [requests[i] for i in generations.skipped]
    if skipped:
        log.warning("%d prompts too long, skipped: %s", len(skipped), ", ".join(r.key for r in skipped[:20]))
    truncated = sum(row["finish_reason"] == "length" for row in rows)
    if generations.seconds > 0:
        log.info(
            "%d predictions (%.1f%% truncated), %.2f predictions/s, %.0f generated tokens/s",
            len(rows),
            100 * truncated / max(len(rows), 1),
            len(rows) / generations.seconds,
            generations.n_generated_tokens / generations.seconds,
        )
    return rows, skipped


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import check_model_dir, model_name

    config = parse_config(args, InferenceConfig)
    check_model_dir(args.model)
    if args.adapter is not None and not args.adapter.is_dir():
        raise InputFileError(f"{args.adapter}: adapter folder not found")
    requests = build_requests(args, config)
    adapter = None if args.adapter is None else str(args.adapter)
    provenance = Provenance(model=model_name(args.model), adapter=adapter, sampling=config.sampling())
    rows: list[dict] = []
    if requests:
        engine = Engine(config.engine(str(args.model), adapter))
        rows, _ = predict(engine, requests, config.sampling(), provenance)
    else:
        log.warning("no prompts to sample: writing an empty predictions file")
    write_table(rows, args.output, PREDICTIONS_SCHEMA)
    return 0
