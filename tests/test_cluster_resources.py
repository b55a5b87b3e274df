"""One `cluster.gpu` section, the requests of every executor (arc_pipeline/config/cluster.py)."""

from __future__ import annotations

import pytest

from arc_pipeline.config.cluster import (
    gpu_job_resources,
    htcondor_size_mib,
    workstation_core_warning,
    workstation_gpu_jobs_at_once,
)
from arc_pipeline.config.workflow import GpuJobConfig


@pytest.mark.parametrize(
    ("value", "bare_unit", "mib"),
    [
        ("64GB", "M", 65536),  # HTCondor's G is GiB
        ("128G", "M", 131072),
        ("512MB", "M", 512),
        ("8000", "M", 8000),  # request_memory: a bare number is MiB
        (8000, "M", 8000),
        ("100GB", "K", 102400),
        ("2048", "K", 2),  # request_disk: a bare number is KiB
        ("1500", "K", 2),  # rounded up: a request never shrinks
        ("1.5TB", "M", 1572864),
        ("4gb", "M", 4096),
    ],
)
def test_htcondor_sizes_in_mib(value: str | int, bare_unit: str, mib: int) -> None:
    assert htcondor_size_mib(value, bare_unit) == mib


def test_a_size_that_is_no_size_is_refused() -> None:
    with pytest.raises(ValueError, match="not an HTCondor size"):
        htcondor_size_mib("lots", "M")


def test_one_section_gives_every_executor_its_names() -> None:
    resources = gpu_job_resources(GpuJobConfig(request_memory="128GB", request_disk="200GB", runtime=600))
    # HTCondor's names, as written in the config
    assert resources["request_gpus"] == 1 and resources["request_memory"] == "128GB"
    assert resources["request_disk"] == "200GB" and resources["gpus_minimum_memory"] == 40000
    # Slurm's (and Snakemake's standard) names, derived from the same values
    assert resources["gpu"] == resources["gpus"] == 1
    assert resources["mem_mb"] == 131072 and resources["disk_mb"] == 204800 and resources["runtime"] == 600
    assert "slurm_partition" not in resources and "gpu_model" not in resources


def test_partition_and_gpu_model_only_when_set() -> None:
    resources = gpu_job_resources(GpuJobConfig(slurm_partition="gpu", slurm_gpu_model="h100"))
    assert resources["slurm_partition"] == "gpu" and resources["gpu_model"] == "h100"
    # no GPU requested: no GPU model either (sbatch would read --gpus=h100:0)
    cpu_only = gpu_job_resources(GpuJobConfig(request_gpus=0, slurm_gpu_model="h100"))
    assert cpu_only["gpu"] == 0 and "gpu_model" not in cpu_only


def test_the_train_job_asks_for_its_server_and_training_gpus() -> None:
    from arc_pipeline.config.cluster import train_job_gpus
    from arc_pipeline.training.config import TrainConfig

    gpu = GpuJobConfig(slurm_gpu_model="h100")
    server = TrainConfig(
        use_vllm=True, vllm_mode="server", vllm_server_gpus=2, training_processes=3, num_generations=12
    )
    assert train_job_gpus(server, gpu) == 5
    assert train_job_gpus(TrainConfig(training_processes=2), gpu) == 2
    assert train_job_gpus(TrainConfig(), gpu) == 1  # one process, colocated: as before
    # a CPU run, or no GPU for any job: request_gpus as configured
    assert train_job_gpus(TrainConfig(use_cpu=True, bf16=False, training_processes=2), gpu) == 1
    assert train_job_gpus(server, GpuJobConfig(request_gpus=0)) == 0
    resources = gpu_job_resources(gpu, train_job_gpus(server, gpu))
    assert resources["gpus"] == resources["request_gpus"] == resources["gpu"] == 5 and resources["gpu_model"] == "h100"


@pytest.mark.parametrize(
    ("cores", "gpus", "threads", "max_threads", "at_once"),
    [
        (64, 4, 16, None, 4),  # the 4-GPU host with the profile's `cores: all`
        (16, 4, 16, None, 1),  # the same host with --cores 16: one GPU job at a time
        (32, 4, 16, None, 2),
        (16, 4, 16, 4, 4),  # --max-threads 4 lets four 4-core GPU jobs share 16 cores
        (2, 4, 16, None, 1),  # Snakemake caps a job's threads at --cores: still one at a time
        (64, 1, 16, None, 1),
    ],
)
def test_how_many_gpu_jobs_a_local_run_starts_at_once(
    cores: int, gpus: int, threads: int, max_threads: int | None, at_once: int
) -> None:
    assert workstation_gpu_jobs_at_once(cores, gpus, threads, max_threads) == at_once


def test_a_local_run_whose_cores_leave_gpus_idle_is_warned_with_the_fix() -> None:
    warning = workstation_core_warning(16, 4, 16, None)
    assert warning is not None
    assert "at most 1 of the 4 GPUs" in warning and "--max-threads 4" in warning
    assert workstation_core_warning(64, 4, 16, None) is None
    assert workstation_core_warning(16, 4, 16, 4) is None
    assert workstation_core_warning(2, 1, 16, None) is None  # one GPU: nothing to run beside it
    assert workstation_core_warning(2, 0, 16, None) is None  # no --resources gpus
