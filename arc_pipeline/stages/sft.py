"""Stage ``sft``: supervised fine-tuning of a refinement LoRA adapter on the model's own solving refinements
(``sft_dataset``'s parquet; docs/scoring.md, "SFT refiner").

Outputs, as the ``train`` stage's: the adapter folder (``--output``, with ``training_summary.json``) and the
per-step metrics parquet (``--metrics``, ``TRAINING_METRICS_SCHEMA``: TRL's loss, mean_token_accuracy,
learning_rate, ...). Checkpoints live in ``--checkpoint-dir`` (default ``<output>_checkpoints``), not a
declared output: a rerun after a kill resumes from the last complete one. The config is
:class:`arc_pipeline.training.sft.config.SftConfig`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.io import check_parquet
from arc_pipeline.schemas import SFT_DATASET_SCHEMA
from arc_pipeline.training.sft.config import SftConfig

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, required=True, help="SFT parquet (SFT_DATASET_SCHEMA)")
    parser.add_argument("--model", type=Path, required=True, help="base model folder")
    parser.add_argument("--output", type=Path, required=True, help="adapter folder to write")
    parser.add_argument("--metrics", type=Path, required=True, help="training metrics parquet to write")
    parser.add_argument("--checkpoint-dir", type=Path, help="checkpoints (default: <output>_checkpoints)")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import check_model_dir
    from arc_pipeline.training.sft.trainer import train_sft

    config = parse_config(args, SftConfig)
    # the inputs are checked here, in a second: training reads them only after importing torch and TRL
    check_parquet(args.dataset, SFT_DATASET_SCHEMA)
    check_model_dir(args.model)
    result = train_sft(config, args.dataset, args.model, args.output, args.metrics, args.checkpoint_dir)
    resumed = f" (resumed from {result.resumed_from})" if result.resumed_from else ""
    log.info("SFT done at step %d%s", result.global_step, resumed)
    return 0
