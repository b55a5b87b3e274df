"""profiles/slurm without a cluster: what sbatch and srun are asked for, for every job of the real DAG.

The workflow is planned in this process as `snakemake --profile profiles/slurm` plans it (the dry-run executor
swapped in, tests/test_profiles.py); each job's sbatch options are then built by the plugin's own functions,
as its run_job builds them before adding the account, the partition and --wrap, and the options of the
srun step inside the allocation by the job step plugin's. The real scheduler runs the DAG in
tests/workflow/test_slurm.py.
"""

from __future__ import annotations

import os

os.environ["CONDOR_CONFIG"] = os.devnull  # tests.test_profiles imports htcondor2: never reach a real pool

import re
from pathlib import Path

import pytest
import yaml
from snakemake import cli
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string
from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting, get_gpu_setting

from tests.test_profiles import (  # noqa: F401  (workdir: a throwaway copy of the workflow)
    CPU_THREADED_RULES,
    GPU_RULES,
    PUBLISHED,
    REPO,
    _cluster_config,
    _dry_run_in_process,
    gpu_rules_of,
    workdir,
)

PROFILE = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())


def _sbatch_options(job, settings) -> str:
    params = {
        "run_uuid": "run",
        "slurm_logfile": "logs/slurm/%j.log",
        "comment_str": f"rule_{job.rule.name}",
        "account": "",
        "partition": f" -p {job.resources.get('slurm_partition')}" if job.resources.get("slurm_partition") else "",
        "workdir": ".",
    }
    return get_submit_command(job, params, settings=settings) + set_gres_string(job)


def _option(options: str, name: str) -> str | None:
    match = re.search(rf"(?:^|\s){re.escape(name)}[= ](\S+)", options)
    return match.group(1) if match else None


def test_slurm_profile_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    _, args = cli.parse_args(["--profile", "profiles/slurm", "-n"])
    assert args.executor == "slurm"
    assert args.retries >= 1 and args.rerun_incomplete and args.keep_going
    assert {"mem_mb", "runtime"} <= set(PROFILE["default-resources"])
    assert not {"gpu", "gpus", "request_gpus"} & set(PROFILE["default-resources"])


@pytest.mark.parametrize("configfile", [None, PUBLISHED], ids=["default", "barc-multiturn"])
def test_gpu_jobs_ask_sbatch_for_the_configured_gpu(
    workdir: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    configfile: str | None,
) -> None:
    argv = ["--profile", "profiles/slurm"] + (["--configfile", configfile] if configfile else [])
    workflow, settings = _dry_run_in_process(argv, monkeypatch, executor="slurm")
    gpu, cpu = _cluster_config(configfile)["gpu"], _cluster_config(configfile)["cpu"]
    defaults = PROFILE["default-resources"]
    # request_memory of the presets is in GB: HTCondor's G is GiB, Slurm's --mem is MiB
    gpu_mem = int(gpu["request_memory"].removesuffix("GB")) * 1024
    expected, seen = gpu_rules_of(configfile), set()
    for job in workflow.dag.jobs:
        if job.rule.name in workflow._localrules or job.is_norun:  # run by Snakemake itself, never submitted
            continue
        seen.add(job.rule.name)
        options = _sbatch_options(job, settings)
        step = f"{get_cpu_setting(job, job.rule.name in expected)} {get_gpu_setting(job)}"
        if job.rule.name in expected:
            assert _option(options, "--gpus") == str(gpu["request_gpus"]), options
            assert _option(options, "--mem") == str(gpu_mem), options
            assert _option(options, "-t") == str(gpu.get("runtime", 1440)), options
            assert _option(options, "--cpus-per-task") == str(gpu["threads"]), options
            assert _option(step, "--gpus") == str(gpu["request_gpus"]), step  # the srun step inside holds it too
        else:
            assert "--gpus" not in options and "--gres" not in options and "--gpus" not in step, options
            assert _option(options, "--mem") == str(defaults["mem_mb"]), options
            assert _option(options, "-t") == str(defaults["runtime"]), options
            threads = cpu["threads"] if job.rule.name in CPU_THREADED_RULES else 1
            assert _option(options, "--cpus-per-task") == str(threads), (job.rule.name, options)
    assert expected <= seen and len(seen - expected) > 5


def test_partition_and_gpu_model_reach_sbatch(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    config = ["cluster={gpu: {slurm_partition: gpu, slurm_gpu_model: h100, runtime: 90}}"]
    workflow, settings = _dry_run_in_process(
        ["--profile", "profiles/slurm", "--config", *config], monkeypatch, executor="slurm"
    )
    for job in workflow.dag.jobs:
        if job.rule.name in GPU_RULES:
            options = _sbatch_options(job, settings)
            assert _option(options, "-p") == "gpu" and _option(options, "--gpus") == "h100:1", options
            assert _option(options, "-t") == "90", options
        elif not job.is_norun and job.rule.name not in workflow._localrules:
            assert _option(_sbatch_options(job, settings), "-p") is None


def test_train_asks_for_its_server_and_training_gpus(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # server mode: 1 GPU for vLLM + 2 training processes = 3 for the train job; inference keeps request_gpus.
    # The preset's fp8 rollout weights and fp8 KV cache are the colocated engine's: a server samples from bf16
    config = [
        (
            "train={vllm_mode: server, vllm_server_gpus: 1, training_processes: 2, vllm_quantization: none, "
            "vllm_kv_cache_dtype: auto}"
        )
    ]
    argv = ["--profile", "profiles/slurm", "--configfile", PUBLISHED, "--config", *config]
    workflow, settings = _dry_run_in_process(argv, monkeypatch, executor="slurm")
    gpus = {}
    for job in workflow.dag.jobs:
        if job.rule.name in GPU_RULES:
            options = _sbatch_options(job, settings)
            gpus[job.rule.name] = (_option(options, "--gpus"), _option(get_gpu_setting(job), "--gpus"))
    assert gpus.pop("train") == ("3", "3")
    assert set(gpus.values()) == {("1", "1")}
