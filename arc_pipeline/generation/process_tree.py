"""No engine process outlives the stage that started it.

vLLM runs its engine core and workers in child processes (on GPUs, and wherever
``VLLM_ENABLE_V1_MULTIPROCESSING=1``; a CPU stage keeps them in its own process: ``engine_args.py``,
``platform_environment``). When a stage ends badly (an exception, a
SIGTERM from Snakemake or HTCondor, Ctrl-C, the stall watchdog) those children can be left behind: a
``VLLM::Worker`` spinning in a CPU kernel ignores SIGTERM and keeps a core busy until someone runs
``kill -9``. :func:`own_descendants` makes the stage process responsible for every process below it:

- it becomes a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``), so a grandchild whose parent died
  is re-parented to the stage instead of to init, and stays findable;
- at exit, on an uncaught exception and on SIGTERM/SIGINT/SIGHUP, every descendant gets SIGKILL
  (never a polite signal first: a stalled worker does not answer one).

A stage killed with SIGKILL runs no handler; there vLLM's own engine processes notice their parent's
death. (A parent-death signal on every fork would cover that case too, but it fires when the *thread*
that forked exits, which would kill processes forked from worker threads, such as sandbox workers.)
Linux only; elsewhere the prctl call is skipped and only the exit-time sweep remains.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Iterable

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_installed = False


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def die_with_parent(parent_pid: int) -> None:
    """Make this (helper) process get SIGKILL when its parent ends, e.g. as a pool's ``initializer``.

    A process pool's workers wait on a queue they hold both ends of: when the stage that started them is
    killed with SIGKILL, nothing else ends them. Call it only in processes started by a thread that lives
    as long as the parent (the parent-death signal follows the thread that forked). Exits at once when
    ``parent_pid`` is already gone."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (default: this process), children before grandchildren."""
    import psutil

    try:
        children = psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [child.pid for child in children]


def kill_all(pids: Iterable[int]) -> int:
    """SIGKILL each pid that still exists; returns how many were signalled."""
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def kill_descendants(reason: str, quiet: bool = False) -> int:
    """SIGKILL every process below this one (repeated while new ones appear: a dying parent may fork)."""
    total = 0
    for _ in range(5):
        pids = descendants()
        if not pids:
            break
        total += kill_all(pids)
    if total and not quiet:
        log.info("killed %d leftover engine process(es) (%s)", total, reason)
    return total


def _sweep_at_exit() -> None:
    kill_descendants("stage exit", quiet=True)  # logging's streams may already be closed here


def _on_signal(signum: int, _frame: object) -> None:
    kill_descendants(f"signal {signal.Signals(signum).name}")
    # Die of the same signal, so the caller (Snakemake, a shell) sees what happened.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def own_descendants() -> None:
    """Make this process reap and kill every process it spawns from now on (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    atexit.register(_sweep_at_exit)
    for signum in _HANDLED_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _on_signal)
