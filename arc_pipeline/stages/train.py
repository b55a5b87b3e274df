"""Stage ``train``: GRPO training of the refinement LoRA adapter (docs/defaults.md).

Outputs: the adapter folder (``--output``) and the per-step metrics parquet (``--metrics``,
``TRAINING_METRICS_SCHEMA``). Checkpoints live in ``--checkpoint-dir`` (default: beside the output,
``<output>_checkpoints``), which is not a declared output: when the job is killed and rerun, training
resumes from the last complete checkpoint there. TensorBoard logs are under
``<checkpoint-dir>/runs``. The config is :class:`arc_pipeline.training.config.TrainConfig`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.io import check_parquet
from arc_pipeline.schemas import REFINEMENT_SCHEMA
from arc_pipeline.training.config import TrainConfig

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, required=True, help="refinement parquet (REFINEMENT_SCHEMA)")
    parser.add_argument("--model", type=Path, required=True, help="base model folder")
    parser.add_argument("--output", type=Path, required=True, help="adapter folder to write")
    parser.add_argument("--metrics", type=Path, required=True, help="training metrics parquet to write")
    parser.add_argument("--checkpoint-dir", type=Path, help="checkpoints (default: <output>_checkpoints)")
    parser.add_argument(
        "--threads",
        type=int,
        help="CPUs this job may use (Snakemake's threads): the default number of reward sandbox workers",
    )
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import check_model_dir
    from arc_pipeline.training.grpo import train

    config = parse_config(args, TrainConfig)
    # The inputs are checked here, in a second: training reads them only after importing torch and TRL.
    check_parquet(args.dataset, REFINEMENT_SCHEMA)
    check_model_dir(args.model)
    config = config.model_copy(update={"execution_workers": config.reward_workers(args.threads)})
    result = train(config, args.dataset, args.model, args.output, args.metrics, args.checkpoint_dir)
    log.info(
        "training done at step %d%s%s",
        result.global_step,
        f" (resumed from {result.resumed_from})" if result.resumed_from else "",
        f"; collapse guard kept {result.kept_checkpoint}" if result.stopped_by_guard else "",
    )
    return 0
