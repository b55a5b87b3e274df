"""Stage ``train``: GRPO training of the refinement LoRA adapter (docs/defaults.md).

Outputs: the adapter folder (``--output``) and the per-step metrics parquet (``--metrics``,
``TRAINING_METRICS_SCHEMA``). Checkpoints live in ``--checkpoint-dir`` (default: beside the output,
``<output>_checkpoints``), which is not a declared output: when the job is killed and rerun, training
resumes from the last complete checkpoint there. TensorBoard logs are under
``<checkpoint-dir>/runs``. The config is :class:`arc_pipeline.training.config.TrainConfig`.

With ``vllm_mode: server`` or ``training_processes`` > 1 this process starts the job's vLLM server and
training ranks and watches them (arc_pipeline/training/launch.py, docs/multi-gpu.md); each rank runs this
same command with ``--rank-process``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import InputFileError, check_parquet
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
        "--init-adapter", type=Path, help="trained adapter folder to continue (train.init_adapter: sft; the workflow)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="CPUs this job may use (Snakemake's threads): the default number of reward sandbox workers",
    )
    # Set by arc_pipeline/training/launch.py on the processes it starts (several processes or server mode):
    parser.add_argument(
        "--rank-process",
        action="store_true",
        help="internal: this is one training rank started by the stage itself (torch.distributed.run)",
    )
    parser.add_argument("--vllm-server-port", type=int, help="internal: port of the job's vLLM server (server mode)")
    parser.add_argument("--vllm-group-port", type=int, help="internal: weight-sync port of that server")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import check_model_dir
    from arc_pipeline.training.checkpoints import default_checkpoint_dir
    from arc_pipeline.training.grpo import train
    from arc_pipeline.training.trainer_args import VllmServer

    config = parse_config(args, TrainConfig)
    if not config.use_vllm and config.backend == "trl":
        from arc_pipeline.training.processes.trl_imports import import_trl_without_vllm

        import_trl_without_vllm()  # transformers samples here: TRL need not load vLLM
    # The inputs are checked here, in a second: training reads them only after importing torch and TRL.
    check_parquet(args.dataset, REFINEMENT_SCHEMA)
    check_model_dir(args.model)
    if (config.init_adapter != "none") != (args.init_adapter is not None):
        raise PipelineError(
            f"train: init_adapter {config.init_adapter!r} "
            + ("needs --init-adapter FOLDER" if args.init_adapter is None else "takes no --init-adapter")
        )
    if args.init_adapter is not None and not args.init_adapter.is_dir():
        raise InputFileError(f"{args.init_adapter}: adapter folder not found")
    config = config.model_copy(update={"execution_workers": config.reward_workers(args.threads)})
    if config.launched and not args.rank_process:
        # several processes or a vLLM server: this process starts and watches them (docs/multi-gpu.md)
        from arc_pipeline.training.launch import StageFiles, run_launched

        checkpoints = args.checkpoint_dir or default_checkpoint_dir(args.output)
        files = StageFiles(args.dataset, args.model, args.output, args.metrics, checkpoints, args.init_adapter)
        log.info("training done at step %d", run_launched(config, files))
        return 0
    server = None
    if args.vllm_server_port is not None:
        from arc_pipeline.training.processes.ports import HOST

        if args.vllm_group_port is None:
            raise PipelineError("train: --vllm-server-port needs --vllm-group-port")
        server = VllmServer(HOST, args.vllm_server_port, args.vllm_group_port)
    result = train(
        config,
        args.dataset,
        args.model,
        args.output,
        args.metrics,
        args.checkpoint_dir,
        server=server,
        rank_process=args.rank_process,
        init_adapter=args.init_adapter,
    )
    log.info(
        "training done at step %d%s%s",
        result.global_step,
        f" (resumed from {result.resumed_from})" if result.resumed_from else "",
        f"; collapse guard kept {result.kept_checkpoint}" if result.stopped_by_guard else "",
    )
    return 0
