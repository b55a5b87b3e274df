"""GPUs per job on a workstation: pick free GPUs and set ``CUDA_VISIBLE_DEVICES`` before CUDA starts.

Snakemake (``profiles/workstation``) limits how many GPU jobs run at once by the ``gpus`` resource
that the GPU rules declare, but does not say *which* GPU a job gets. Without this, every vLLM job
would open GPU 0, and two jobs that each take 0.92 of its memory would fail. Each GPU command
(``inference``, ``train``) therefore takes an exclusive lock file per GPU (``flock``: released by the
kernel when the process ends, however it ends) and exports the locked indices.

Skipped when ``CUDA_VISIBLE_DEVICES`` is already set (HTCondor and Slurm set it; so may the user),
when no NVIDIA GPU is visible, or with ``ARC_PIPELINE_GPU_PINNING=0``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from arc_pipeline.errors import PipelineError

log = logging.getLogger(__name__)

_held: list[int] = []  # lock file descriptors held for the life of the process


def count_gpus() -> int:
    """NVIDIA GPUs on this machine (0 when there is no driver)."""
    proc = Path("/proc/driver/nvidia/gpus")
    if proc.is_dir():
        return len(list(proc.iterdir()))
    if shutil.which("nvidia-smi"):
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        return sum(line.startswith("GPU ") for line in result.stdout.splitlines()) if result.returncode == 0 else 0
    return 0


def default_lock_dir() -> Path:
    return Path(
        os.environ.get("ARC_PIPELINE_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / f"arc-pipeline-gpus-{os.getuid()}"
    )


def acquire(count: int, n_gpus: int, lock_dir: Path, poll_s: float = 5.0) -> list[int]:
    """Lock ``count`` of the GPUs ``0..n_gpus-1`` (waiting while others hold them); return their indices."""
    if count > n_gpus:
        raise PipelineError(
            f"this job needs {count} GPUs and the machine has {n_gpus}: lower inference.tensor_parallel_size, "
            f"or train.training_processes (+ train.vllm_server_gpus in server mode), to at most {n_gpus}"
        )
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        taken: list[tuple[int, int]] = []
        for index in range(n_gpus):
            fd = os.open(lock_dir / f"gpu{index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            taken.append((index, fd))
            if len(taken) == count:
                _held.extend(fd for _, fd in taken)
                return [index for index, _ in taken]
        for _, fd in taken:
            os.close(fd)
        if not waited:
            log.info("all %d GPUs are taken by other jobs (locks in %s): waiting for a free one", n_gpus, lock_dir)
            waited = True
        time.sleep(poll_s)


def pin_gpus(count: int = 1) -> list[int] | None:
    """Set ``CUDA_VISIBLE_DEVICES`` to ``count`` free GPUs, unless pinning does not apply (see module)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None or os.environ.get("ARC_PIPELINE_GPU_PINNING") == "0":
        return None
    n_gpus = count_gpus()
    if n_gpus == 0:
        return None
    indices = acquire(count, n_gpus, default_lock_dir())
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, indices))
    log.info("CUDA_VISIBLE_DEVICES=%s (free GPUs of %d on this machine)", os.environ["CUDA_VISIBLE_DEVICES"], n_gpus)
    return indices
