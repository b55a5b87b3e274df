"""The workstation profile: GPU jobs scheduled by a `gpus` resource, each pinned to its own free GPU."""

from __future__ import annotations

import json
import os

os.environ["CONDOR_CONFIG"] = os.devnull  # before htcondor2 is imported: never reach a real pool

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from snakemake import cli
from snakemake.workflow import Workflow

from arc_pipeline.errors import PipelineError
from arc_pipeline.gpu_slots import acquire, pin_gpus
from tests.test_profiles import gpu_rules_of, workdir  # noqa: F401  (workdir: a throwaway copy of the workflow)

REPO = Path(__file__).resolve().parents[1]


def _dry_run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Workflow:
    captured: dict[str, Any] = {}
    original = Workflow.execute

    def keep(self: Workflow, **kwargs: Any) -> Any:
        result = original(self, **kwargs)
        captured["workflow"] = self
        return result

    monkeypatch.setattr(Workflow, "execute", keep)
    parser, args = cli.parse_args(argv)
    assert cli.args_to_api(args, parser)
    return captured["workflow"]


@pytest.mark.parametrize("configfile", [None, "config/barc-multiturn.yaml"], ids=["default", "barc-multiturn"])
def test_gpu_rules_take_one_gpu_of_the_machines_gpus(
    workdir: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    configfile: str | None,
) -> None:
    argv = ["--profile", "profiles/workstation", "-n", "--resources", "gpus=4"]
    workflow = _dry_run(argv + (["--configfile", configfile] if configfile else []), monkeypatch)
    assert workflow.global_resources["gpus"] == 4
    per_rule = {job.rule.name: job.resources.get("gpus", 0) for job in workflow.dag.jobs}
    expected = gpu_rules_of(configfile)
    assert {rule for rule, gpus in per_rule.items() if gpus} == expected
    assert all(per_rule[rule] == 1 for rule in expected)


def test_workstation_profile_defaults_to_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    _, args = cli.parse_args(["--profile", "profiles/workstation", "-n"])
    assert set(args.resources) == {"gpus"} and args.resources["gpus"].value == 1
    assert args.executor in (None, "local") and args.show_failed_logs


HOLDER = """
import sys, time
from pathlib import Path
from arc_pipeline.gpu_slots import acquire
print(",".join(map(str, acquire(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), poll_s=0.05))), flush=True)
time.sleep(float(sys.argv[4]))
"""


def _holder(count: int, n_gpus: int, lock_dir: Path, hold_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(count), str(n_gpus), str(lock_dir), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_concurrent_jobs_get_different_gpus_and_wait_for_a_free_one(tmp_path: Path) -> None:
    first = _holder(1, 2, tmp_path, 3.0)
    assert first.stdout.readline().strip() == "0"
    second = _holder(1, 2, tmp_path, 0.0)
    assert second.stdout.readline().strip() == "1"
    second.wait(timeout=30)
    started = time.monotonic()
    third = _holder(2, 2, tmp_path, 0.0)  # needs both: waits until the first job ends
    assert third.stdout.readline().strip() == "0,1"
    assert time.monotonic() - started > 1.0
    assert first.wait(timeout=30) == 0 and third.wait(timeout=30) == 0


def test_pinning_leaves_a_set_cuda_visible_devices_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert pin_gpus(1) is None and os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    with pytest.raises(PipelineError, match="needs 2 GPUs and the machine has 1"):
        acquire(2, 1, tmp_path)


def test_a_train_job_locks_its_server_and_training_gpus() -> None:
    from arc_pipeline.cli import _gpu_count

    server = {"use_vllm": True, "vllm_mode": "server", "vllm_server_gpus": 2, "training_processes": 2}
    assert _gpu_count("train", json.dumps(server)) == 4
    assert _gpu_count("train", json.dumps({"training_processes": 2})) == 2
    assert _gpu_count("train", json.dumps({"use_cpu": True, "bf16": False, "training_processes": 2})) == 1
    assert _gpu_count("inference", json.dumps({"tensor_parallel_size": 2})) == 2
