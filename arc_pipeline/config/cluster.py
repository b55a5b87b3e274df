"""The resources a GPU rule declares, for every executor at once, from one ``cluster.gpu`` section.

Each executor plugin reads its own names and ignores the others', so one dict serves all runs:

* HTCondor (profiles/condor): ``request_gpus``, ``request_memory``, ``request_disk``, ``gpus_minimum_memory``
  exactly as written in the config (HTCondor units);
* Slurm (profiles/slurm): ``gpu`` (sbatch ``--gpus``; with ``gpu_model`` ``--gpus=<model>:<n>``), ``mem_mb``
  (``--mem``), ``runtime`` (``-t``, minutes), ``slurm_partition`` (``-p``); the job step inside the
  allocation reads ``gpus``;
* a workstation (profiles/workstation): ``gpus``, limited by ``--resources gpus=N``;
* Snakemake's standard ``mem_mb`` and ``disk_mb``, which other executors read.

``threads`` is not a resource: rules set it (it becomes request_cpus and --cpus-per-task).
"""

from __future__ import annotations

import re

from arc_pipeline.config.workflow import GpuJobConfig
from arc_pipeline.training.config import TrainConfig

# HTCondor's size suffixes are binary: K = KiB, M = MiB, G = GiB, T = TiB (a trailing B is optional).
_HTCONDOR_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def htcondor_size_mib(value: str | int, bare_unit: str) -> int:
    """An HTCondor size (``64GB``, ``8000``) in MiB; a bare number is in ``bare_unit`` (``M`` for
    request_memory, ``K`` for request_disk, as HTCondor reads them). Rounded up: a request never shrinks."""
    match = _HTCONDOR_SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not an HTCondor size such as 64GB, 512MB or 8000")
    number, unit = float(match.group(1)), (match.group(2) or bare_unit).upper()
    mib = number * _MIB_PER_UNIT[unit]
    return max(1, int(-(-mib // 1)))


def train_job_gpus(train: TrainConfig, gpu: GpuJobConfig) -> int:
    """GPUs of the train job: its vLLM server's plus one per training process (docs/multi-gpu.md).

    ``cluster.gpu.request_gpus`` 0 (no GPU for any job) and ``train.use_cpu`` keep ``request_gpus``, as before."""
    if gpu.request_gpus == 0 or train.use_cpu:
        return gpu.request_gpus
    return train.job_gpus


def gpu_job_resources(gpu: GpuJobConfig, gpus: int | None = None) -> dict[str, int | str]:
    """The ``resources:`` of every GPU rule (see the module docstring for who reads which name); ``gpus``
    replaces ``gpu.request_gpus`` (the train job's own count, :func:`train_job_gpus`)."""
    count = gpu.request_gpus if gpus is None else gpus
    resources: dict[str, int | str] = {
        "gpus": count,
        "request_gpus": count,
        "request_memory": gpu.request_memory,
        "request_disk": gpu.request_disk,
        "gpus_minimum_memory": gpu.gpus_minimum_memory,
        "gpu": count,
        "mem_mb": htcondor_size_mib(gpu.request_memory, "M"),
        "disk_mb": htcondor_size_mib(gpu.request_disk, "K"),
        "runtime": gpu.runtime,
    }
    if gpu.slurm_partition:
        resources["slurm_partition"] = gpu.slurm_partition
    if gpu.slurm_gpu_model and count:
        resources["gpu_model"] = gpu.slurm_gpu_model
    return resources


def workstation_gpu_jobs_at_once(cores: int, gpus: int, gpu_job_threads: int, max_threads: int | None) -> int:
    """How many one-GPU jobs a local Snakemake run can start side by side: each takes ``gpu_job_threads``
    cores (capped by ``--max-threads`` and by ``--cores``, as Snakemake caps them), so the cores, not the GPUs,
    can be what runs them one at a time."""
    threads = min(gpu_job_threads, max_threads or gpu_job_threads, cores)
    return max(1, min(gpus, cores // threads))


def workstation_core_warning(cores: int, gpus: int, gpu_job_threads: int, max_threads: int | None) -> str | None:
    """The warning a local run with ``--resources gpus=N`` prints when its cores let fewer than N GPU jobs run
    at once (measured: the GPU smoke DAG with ``--cores 16`` on a 64-core host with 4 GPUs ran its two
    first-turn inference jobs one after the other; benchmarks/README.md), or None."""
    at_once = workstation_gpu_jobs_at_once(cores, gpus, gpu_job_threads, max_threads)
    if gpus <= 1 or at_once >= gpus:
        return None
    per_job = max(1, cores // gpus)
    return (
        f"--resources gpus={gpus} with --cores {cores}: every GPU job takes cluster.gpu.threads={gpu_job_threads} "
        f"cores, so at most {at_once} of the {gpus} GPUs can run a job at once. Give the run more cores "
        f"(the workstation profile's default is all of them) or cap each job with --max-threads {per_job}."
    )
