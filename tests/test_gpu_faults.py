"""benchmarks/gpu_faults.py sends each fault to the right process of a train job: the vLLM server (the stage's
child running vLLM, not the ranks' torchrun, whose arguments name --vllm-server-port too), the first training
rank, or the stage. Real processes in the shape the stage's supervisor starts (its tag in their environment);
the faults' effects on a real train job are the script's own run (docs/reliability.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.benchmark_scripts import load_benchmark

gpu_faults = load_benchmark("gpu_faults")

# a stage: tags its children as the supervisor does; the ranks' torchrun first (the lower pid), then the server,
# then a rank; prints their pids and waits
STAGE = """
import os, subprocess, sys, time
env = dict(os.environ, {tag}=f"{{os.getpid()}}-test")
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
ranks = ["-m", "torch.distributed.run", "arc_pipeline.cli", "train", "--vllm-server-port", "1"]
torchrun = subprocess.Popen([*sleep, *ranks], env=env)
server = subprocess.Popen([*sleep, "-m", "trl.scripts.vllm_serve"], env=env)
rank = subprocess.Popen([*sleep, "train"], env=dict(env, LOCAL_RANK="0"))
print(torchrun.pid, server.pid, rank.pid, flush=True)
time.sleep(60)
"""


def test_each_fault_goes_to_its_process():
    code = STAGE.format(tag=gpu_faults.TAG_VARIABLE)
    stage = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        torchrun, server, rank = map(int, stage.stdout.readline().split())
        assert set(gpu_faults.job_processes(stage.pid)) == {torchrun, server, rank}
        assert gpu_faults.fault_target("server-kill", stage.pid) == server
        assert gpu_faults.fault_target("rank-kill", stage.pid) == rank
        assert gpu_faults.fault_target("stage-term", stage.pid) == stage.pid
    finally:
        os.killpg(stage.pid, signal.SIGKILL)
        stage.wait()
