"""One train job, several processes: the vLLM server (server mode) and the data-parallel training ranks.

Used by the ``train`` stage when ``train.vllm_mode`` is ``server`` or ``train.training_processes`` > 1
(docs/multi-gpu.md). In order:

1. the checkpoint folder is prepared here, once (arc_pipeline/training/grpo.py ``prepare_run``): the ranks
   only read it; a run whose checkpoint already reached the end is written out without starting anything;
2. the job's GPUs (``CUDA_VISIBLE_DEVICES``, set by the batch system or arc_pipeline/gpu_slots.py) are split:
   the first ``vllm_server_gpus`` for the server, the next ``training_processes`` for the ranks;
3. server mode: ``python -m trl.scripts.vllm_serve`` (``trl vllm-serve``) starts on free ports, and the stage
   waits for its ``/health`` to answer (``vllm_server_timeout_s``);
4. ``python -m torch.distributed.run`` starts the ranks (``arc-pipeline train --rank-process``) on a free
   master port; each rank is a GRPO trainer (gloo on the CPU, NCCL on GPUs);
5. the stage waits until the ranks end, or until any process dies; then every process is stopped
   (arc_pipeline/training/processes/supervisor.py) and a failure ends the stage with one line naming what failed.

``ARC_PIPELINE_VLLM_SERVE_COMMAND`` replaces ``python -m trl.scripts.vllm_serve`` (split like a shell
command; it gets the same arguments): a site's own wrapper, or a test's stand-in server.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from arc_pipeline.cli import RANK_ERRORS_VARIABLE
from arc_pipeline.errors import PipelineError
from arc_pipeline.training.checkpoints import SUMMARY_FILE
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.grpo import prepare_run
from arc_pipeline.training.processes.ports import HOST, free_ports
from arc_pipeline.training.processes.supervisor import StageStopped, Supervisor
from arc_pipeline.training.trainer_args import VllmServer

log = logging.getLogger(__name__)

SERVE_COMMAND_VARIABLE = "ARC_PIPELINE_VLLM_SERVE_COMMAND"
SERVER = "vLLM server"
RANKS = "training processes"


@dataclass(frozen=True)
class Placement:
    """Which GPUs (``CUDA_VISIBLE_DEVICES`` entries) the server and the ranks get; None: none visible (CPU)."""

    server: list[str] | None
    ranks: list[str] | None


@dataclass(frozen=True)
class StageFiles:
    """The train stage's files, as its command line names them."""

    dataset: Path
    model: Path
    output: Path
    metrics: Path
    checkpoint_dir: Path
    init_adapter: Path | None = None  # train.init_adapter: the trained adapter GRPO continues


def visible_gpus() -> list[str] | None:
    """The GPUs this job may use: ``CUDA_VISIBLE_DEVICES`` if set, else every GPU of the machine; None if none."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        gpus = [entry.strip() for entry in value.split(",") if entry.strip() and entry.strip() != "-1"]
        return gpus or None
    from arc_pipeline.gpu_slots import count_gpus

    count = count_gpus()
    return [str(index) for index in range(count)] if count else None


def place(config: TrainConfig, gpus: list[str] | None) -> Placement:
    """Split the visible GPUs: server first, then one per rank. On a machine without GPUs (CPU training,
    tests) every process shares the CPU."""
    if gpus is None:
        return Placement(None, None)
    server = config.vllm_server_gpus if config.vllm_mode == "server" else 0
    if len(gpus) < config.job_gpus:
        raise PipelineError(
            f"this job needs {config.job_gpus} GPUs (train.training_processes {config.training_processes}"
            + (f" + train.vllm_server_gpus {server}" if server else "")
            + f") and {len(gpus)} are visible (CUDA_VISIBLE_DEVICES={','.join(gpus)}); request more "
            "(cluster.gpu) or lower these"
        )
    return Placement(gpus[:server] or None, gpus[server : server + config.training_processes])


def server_command(config: TrainConfig, model_dir: Path, port: int, extra: Sequence[str] = ()) -> list[str]:
    """``trl vllm-serve`` of the base model (TRL pushes the LoRA-merged weights to it every step)."""
    default = [sys.executable, "-m", "trl.scripts.vllm_serve"]
    prefix = shlex.split(os.environ.get(SERVE_COMMAND_VARIABLE) or "") or default
    replicas = config.vllm_server_gpus // config.vllm_server_tensor_parallel_size
    return [
        *prefix,
        "--model",
        str(model_dir),
        "--host",
        HOST,
        "--port",
        str(port),
        "--tensor_parallel_size",
        str(config.vllm_server_tensor_parallel_size),
        "--data_parallel_size",
        str(replicas),
        "--gpu_memory_utilization",
        str(config.vllm_server_gpu_memory_utilization),
        "--max_model_len",
        str(config.max_seq_length),
        "--dtype",
        "bfloat16" if config.bf16 else "auto",
        "--kv_cache_dtype",
        config.vllm_server_kv_cache_dtype,
        *extra,
    ]


def ranks_command(processes: int, master_port: int, stage_args: Sequence[str]) -> list[str]:
    """torchrun of ``processes`` copies of ``arc-pipeline train <stage_args>`` on this machine."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={processes}",
        f"--master-addr={HOST}",
        f"--master-port={master_port}",
        "-m",
        "arc_pipeline.cli",
        "train",
        *stage_args,
    ]


def rank_arguments(config: TrainConfig, files: StageFiles, server: VllmServer | None) -> list[str]:
    """The ranks' ``arc-pipeline train`` arguments: the stage's files, the config, the server's ports."""
    args = [
        "--dataset",
        str(files.dataset),
        "--model",
        str(files.model),
        "--output",
        str(files.output),
        "--metrics",
        str(files.metrics),
        "--checkpoint-dir",
        str(files.checkpoint_dir),
        "--config-json",
        json.dumps(config.model_dump(mode="json")),
        "--rank-process",
    ]
    if files.init_adapter is not None:
        args += ["--init-adapter", str(files.init_adapter)]
    if server is not None:
        args += ["--vllm-server-port", str(server.port), "--vllm-group-port", str(server.group_port)]
    return args


def wait_until_healthy(url: str, supervisor: Supervisor, timeout_s: float, poll_s: float = 1.0) -> None:
    """Return once ``url`` answers 200; a clear error when the server exits first or ``timeout_s`` passes."""
    process = supervisor.children[SERVER]
    deadline = time.monotonic() + timeout_s
    while True:
        status = process.poll()
        if status is not None:
            raise PipelineError(
                f"the vLLM server exited with status {status} before {url} answered (its output is in the log above)"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet
        if time.monotonic() >= deadline:
            raise PipelineError(
                f"the vLLM server did not answer {url} within {timeout_s:g} s "
                "(train.vllm_server_timeout_s); its output is in the log above"
            )
        time.sleep(poll_s)


def _gpu_env(gpus: list[str] | None) -> dict[str, str]:
    env = dict(os.environ)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return env


def run_launched(config: TrainConfig, files: StageFiles) -> int:
    """Run the train job as several processes (see the module); the global step reached."""
    _, finished = prepare_run(
        config, files.dataset, files.model, files.output, files.metrics, files.checkpoint_dir, files.init_adapter
    )
    if finished is not None:
        return finished.global_step
    placement = place(config, visible_gpus())
    if placement.ranks is None:
        log.warning("no GPU visible: the %d training process(es) share the CPU", config.training_processes)
    with Supervisor(config.stop_grace_s) as supervisor:
        try:
            _start_and_wait(config, files, placement, supervisor)
        except StageStopped as stop:
            raise PipelineError(str(stop)) from None
    summary = json.loads((files.output / SUMMARY_FILE).read_text())
    return int(summary["global_step"])


def _start_and_wait(config: TrainConfig, files: StageFiles, placement: Placement, supervisor: Supervisor) -> None:
    server_port, group_port, master_port = free_ports(3)
    server = None
    if config.vllm_mode == "server":
        server = VllmServer(HOST, server_port, group_port)
        supervisor.start(SERVER, server_command(config, files.model, server_port), _gpu_env(placement.server))
        url = f"http://{HOST}:{server_port}/health"
        started = time.monotonic()
        wait_until_healthy(url, supervisor, config.vllm_server_timeout_s)
        log.info("vLLM server healthy at %s after %.0f s", url, time.monotonic() - started)
    command = ranks_command(config.training_processes, master_port, rank_arguments(config, files, server))
    with tempfile.TemporaryDirectory(prefix="arc-pipeline-ranks-") as errors:
        supervisor.start(RANKS, command, {**_gpu_env(placement.ranks), RANK_ERRORS_VARIABLE: errors})
        name, status = supervisor.wait_any()
        if name == SERVER:
            raise PipelineError(f"the vLLM server exited with status {status} while training ran (see the log)")
        if status != 0:
            raise PipelineError(f"the training processes ended with status {status}{_first_error(Path(errors))}")


def _first_error(folder: Path) -> str:
    """``: rank N: <its error line>`` from the ranks' error files (arc_pipeline/cli.py), or a pointer to the log."""
    reports = sorted(folder.glob("rank*"), key=lambda path: path.stat().st_mtime)
    if not reports:
        return "; the first error is in the log above"
    return f": {reports[0].name.replace('rank', 'rank ')}: {reports[0].read_text().strip()}"
