"""The GPU memory record of GPU jobs (arc_pipeline/gpu_memory.py), with a stand-in `nvidia-smi` on PATH.

The stand-in answers the two queries the sampler makes from a script of readings: each call to --query-gpu
returns the next line of `used` values (two GPUs), and --query-compute-apps lists the test process with
the memory in its current reading, so the peaks the record holds can only come from sampling while the
block runs.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from arc_pipeline.gpu_memory import job_gpus, processes_used_mib, record_gpu_memory

# GPU 0 and GPU 1 memory.used per call; the job's GPU is 1 (CUDA_VISIBLE_DEVICES=1).
READINGS = ["700 100", "710 3000", "720 9000", "705 4000"]
FAKE = """#!/bin/sh
state={state}
n=$(cat "$state" 2>/dev/null || echo 0)
case "$1" in
  --query-gpu=*)
    line=$(sed -n "$((n + 1))p" {readings}); [ -n "$line" ] || line=$(tail -n 1 {readings})
    echo $((n + 1)) > "$state"
    set -- $line
    echo "0, GPU-aaa, NVIDIA H200, $1, 143771"
    echo "1, GPU-bbb, NVIDIA H200, $2, 143771" ;;
  --query-compute-apps=*)
    line=$(sed -n "${{n}}p" {readings}); [ -n "$line" ] || line=$(tail -n 1 {readings})
    set -- $line
    echo "{pid}, GPU-bbb, $2"
    echo "1, GPU-aaa, 600" ;;
  *) exit 2 ;;
esac
"""


def _install_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(body)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_peak_of_the_jobs_gpu_is_sampled_while_the_job_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readings = tmp_path / "readings"
    readings.write_text("\n".join(READINGS) + "\n")
    body = FAKE.format(state=tmp_path / "calls", readings=readings, pid=os.getpid())
    _install_fake(tmp_path, monkeypatch, body)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    record = tmp_path / "out" / "shard0.gpu.json"
    with record_gpu_memory(record, "inference", interval_s=0.05):
        time.sleep(0.6)  # several samples: all readings are seen
    result = json.loads(record.read_text())
    assert result["command"] == "inference" and result["samples"] >= len(READINGS)
    assert result["peak_used_mib"] == 9000  # GPU 1 only; GPU 0 (another job's) is not counted
    assert result["processes_peak_mib"] == 9000  # this process's entry; pid 1 is not ours
    [gpu] = result["gpus"]
    assert gpu == {
        "index": "1",
        "uuid": "GPU-bbb",
        "name": "NVIDIA H200",
        "total_mib": 143771,
        "baseline_used_mib": 100,
        "peak_used_mib": 9000,
    }
    assert result["note"] is None and result["errors"] == []


def test_a_failing_nvidia_smi_is_recorded_and_the_job_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_fake(tmp_path, monkeypatch, "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    record = tmp_path / "train.gpu.json"
    with record_gpu_memory(record, "train", interval_s=0.05):
        time.sleep(0.2)
    result = json.loads(record.read_text())
    assert result["peak_used_mib"] is None and result["samples"] == 0
    assert result["errors"] and "NVIDIA-SMI has failed" in result["errors"][0]


def test_without_nvidia_smi_the_record_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    record = tmp_path / "train.gpu.json"
    with pytest.raises(RuntimeError, match="the job's own error"), record_gpu_memory(record, "train"):
        raise RuntimeError("the job's own error")  # the record is written however the block ends
    result = json.loads(record.read_text())
    assert result["peak_used_mib"] is None and result["note"] == "nvidia-smi not found: no GPU measured"


def test_the_jobs_gpus_are_matched_by_index_or_uuid() -> None:
    rows = [["0", "GPU-aaa", "x", "1", "2"], ["1", "GPU-bbb", "x", "1", "2"]]
    assert job_gpus(rows, None) == rows
    assert job_gpus(rows, "GPU-bbb") == [rows[1]]
    assert job_gpus(rows, "0") == [rows[0]]
    # confined by cgroups, the job may see its GPU under another index: then every listed GPU is its own
    assert job_gpus(rows[1:], "0") == rows[1:]
    assert processes_used_mib([["12", "GPU-aaa", "300"], ["13", "GPU-aaa", "200"]], {12, 13}, {"GPU-aaa"}) == 500
    assert processes_used_mib([["12", "GPU-aaa", "300"]], {99}, {"GPU-aaa"}) is None
