"""Peak GPU memory of one job, sampled from outside the process with ``nvidia-smi``.

``torch.cuda.max_memory_allocated`` sees only this process's allocator, while vLLM's engine runs in a child
process and reserves ``gpu_memory_utilization`` of the card for itself: the job's real footprint is only
visible from outside. So while a GPU command runs, a background thread asks ``nvidia-smi`` every
``interval_s`` for

* the memory used on each of the job's GPUs (``--query-gpu``): the job's GPUs are those named in
  ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs, as Slurm, HTCondor and arc_pipeline/gpu_slots.py set it), or
  every GPU nvidia-smi lists when it is unset or names none of them (a job confined to its GPUs by cgroups
  sees only those);
* the memory held by the job's own processes (``--query-compute-apps``, matched by PID against this process
  and its descendants), which excludes other jobs on a shared card; null where nvidia-smi reports PIDs of
  another PID namespace (containers) and none match.

At the end the peaks go to a JSON file (:func:`record_gpu_memory`). Without nvidia-smi (a CPU run) the file
says so and its peaks are null. Measuring never fails the job: every error is logged and noted in the file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

QUERY_GPUS = ["--query-gpu=index,uuid,name,memory.used,memory.total", "--format=csv,noheader,nounits"]
QUERY_APPS = ["--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]


@dataclass
class Gpu:
    index: str
    uuid: str
    name: str
    total_mib: int
    baseline_used_mib: int
    peak_used_mib: int


@dataclass
class GpuMemorySampler:
    """Samples the job's GPUs every ``interval_s`` in a daemon thread between :meth:`start` and :meth:`stop`."""

    interval_s: float = 1.0
    nvidia_smi: str | None = field(default_factory=lambda: shutil.which("nvidia-smi"))
    gpus: dict[str, Gpu] = field(default_factory=dict)  # by uuid
    peak_used_mib: int | None = None  # the largest sum over the job's GPUs seen in one sample
    processes_peak_mib: int | None = None
    samples: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.nvidia_smi is None:
            return
        self.sample()  # the baseline, before the job's work starts
        self._thread = threading.Thread(target=self._loop, name="gpu-memory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=30)
        self.sample()  # what is still held at the end

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def _query(self, arguments: list[str]) -> list[list[str]]:
        done = subprocess.run([self.nvidia_smi, *arguments], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"nvidia-smi {arguments[0]} failed ({done.returncode}): {done.stderr.strip()[:300]}")
        return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]

    def sample(self) -> None:
        """One sample; an error is kept (the first few) and sampling goes on."""
        try:
            rows = self._query(QUERY_GPUS)
            mine = job_gpus(rows, os.environ.get("CUDA_VISIBLE_DEVICES"))
            total = 0
            for index, uuid, name, used, memory_total in mine:
                used_mib = int(float(used))
                gpu = self.gpus.get(uuid)
                if gpu is None:
                    gpu = self.gpus[uuid] = Gpu(index, uuid, name, int(float(memory_total)), used_mib, used_mib)
                gpu.peak_used_mib = max(gpu.peak_used_mib, used_mib)
                total += used_mib
            if mine:
                self.peak_used_mib = max(self.peak_used_mib or 0, total)
            apps = self._query(QUERY_APPS)
            # the process tree (a walk over /proc) only when some process holds GPU memory
            held = processes_used_mib(apps, own_process_tree(), {g[1] for g in mine}) if apps else None
            if held is not None:
                self.processes_peak_mib = max(self.processes_peak_mib or 0, held)
            self.samples += 1
        except Exception as error:  # measuring must never fail the job
            if len(self.errors) < 5:
                log.warning("GPU memory sample failed: %s", error)
                self.errors.append(str(error))

    def summary(self) -> dict:
        note = "nvidia-smi not found: no GPU measured" if self.nvidia_smi is None else None
        if self.nvidia_smi is not None and not self.gpus:
            note = "nvidia-smi listed no GPU of this job"
        return {
            "peak_used_mib": self.peak_used_mib,
            "processes_peak_mib": self.processes_peak_mib,
            "gpus": [vars(gpu) for gpu in self.gpus.values()],
            "samples": self.samples,
            "interval_s": self.interval_s,
            "note": note,
            "errors": self.errors,
        }


def job_gpus(rows: list[list[str]], visible: str | None) -> list[list[str]]:
    """The rows (index, uuid, name, used, total) of the job's GPUs, see the module docstring."""
    if not visible:
        return rows
    wanted = [entry.strip() for entry in visible.split(",") if entry.strip()]
    matched = [row for row in rows if row[0] in wanted or row[1] in wanted]
    return matched or rows


def own_process_tree() -> set[int]:
    """This process and all its descendants, read from /proc (empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            after_name = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # a process that ended meanwhile
        children.setdefault(int(after_name[1]), []).append(int(entry.parent.name))
    tree, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def processes_used_mib(rows: list[list[str]], pids: set[int], uuids: set[str]) -> int | None:
    """MiB held on the job's GPUs by the job's processes; None when none of them is listed."""
    held = [int(float(used)) for pid, uuid, used in rows if pid.isdigit() and int(pid) in pids and uuid in uuids]
    return sum(held) if held else None


@contextmanager
def record_gpu_memory(path: Path | str | None, command: str, interval_s: float = 1.0) -> Iterator[None]:
    """Sample the job's GPU memory while the block runs and write the peaks to ``path`` as JSON
    (nothing when ``path`` is None). The file is written however the block ends."""
    if path is None:
        yield
        return
    sampler = GpuMemorySampler(interval_s=interval_s)
    started = time.monotonic()
    try:
        sampler.start()
    except Exception as error:  # never fail the job for its measurement
        log.warning("GPU memory sampling did not start: %s", error)
    try:
        yield
    finally:
        try:
            sampler.stop()
            result = {"command": command, "seconds": round(time.monotonic() - started, 1), **sampler.summary()}
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(json.dumps(result, indent=1) + "\n")
            if result["peak_used_mib"] is not None:
                log.info("peak GPU memory of %s: %d MiB on its GPUs", command, result["peak_used_mib"])
        except Exception as error:
            log.warning("could not write the GPU memory record %s: %s", path, error)
