"""Logging for commands: one format, to stderr and optionally a file (Snakemake's ``log:``).

With a log file, the process's stdout and stderr (file descriptors 1 and 2) are sent through ``tee``
into that file as well as to the terminal: a stage's log then holds what the libraries it drives print
(vLLM's engine subprocesses inherit the descriptors), Python warnings, and the error that ended it
with its traceback, not only this package's own log lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=FORMAT,
        handlers=[logging.StreamHandler(sys.stderr)],
        force=True,
    )
    # Library warnings (warnings.warn: transformers, TRL, torch) go through logging, hence to the log.
    logging.captureWarnings(True)


@contextlib.contextmanager
def output_to_log(log_file: str | None) -> Iterator[None]:
    """While active, everything written to fd 1 and 2 (by this process or its children) is appended to
    ``log_file`` and still shown on the original stderr."""
    if not log_file:
        yield
        return
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    read_end, write_end = os.pipe()
    # tee is started detached (via a shell that exits at once, in its own session), so it is no
    # descendant of the stage: the stages' sweep of leftover engine processes (process_tree) does not
    # kill it, a Snakemake cancel does not cut it off, and it ends by itself when the last writer
    # (this process or a child still running) closes the pipe.
    starter = subprocess.run(
        ["sh", "-c", f'tee -a "$1" <&{read_end} >&2 {read_end}<&- & echo $!', "sh", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=saved[2],
        pass_fds=(read_end,),
        start_new_session=True,
        check=True,
        text=True,
    )
    tee_pid = int(starter.stdout.strip())
    os.close(read_end)
    for fd in (1, 2):
        os.dup2(write_end, fd)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        _wait_gone(tee_pid, timeout_s=0.5)  # at once, unless engine children still hold the pipe (killed at exit)


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:  # a zombie (state Z) has finished writing; its reaper may be slow or absent in containers
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (FileNotFoundError, IndexError):
            return
        time.sleep(0.01)
