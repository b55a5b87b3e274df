"""The home page of ``snakemake --report``: what ran (preset, model, adapter, dates, code, machine).

Snakemake renders the workflow description with only the config at hand, so the Snakefile writes this
text to a file when it is parsed (``.snakemake/arc-pipeline/report-home.rst``) from what the results
folder records: ``model/base/model.json`` (where the model came from), the adapter's
``training_summary.json`` (steps, resume, collapse guard), the outputs' dates. The code version and
machine are those that build the report, and say so: no stage records its machine.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _commit(repo: Path) -> str:
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"
    if not commit:
        return "unknown (not a git checkout)"
    return commit + (" with uncommitted changes" if dirty else "")


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = ""
    proc = Path("/proc/driver/nvidia/gpus")
    if proc.is_dir():
        names = [(_json_like(p / "information").get("Model") or "GPU") for p in sorted(proc.iterdir())]
        gpus = f", GPUs: {', '.join(names)}" if names else ""
    return f"{platform.node()}: {os.cpu_count()} x {cpu}{gpus}"


def _json_like(path: Path) -> dict[str, str]:
    """``Key: value`` lines (the NVIDIA driver's information files)."""
    try:
        return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in path.read_text().splitlines())}
    except OSError:
        return {}


def _dates(results: Path) -> str:
    times = [p.stat().st_mtime for p in results.rglob("*") if p.is_file() and "logs" not in p.parts]
    if not times:
        return "no outputs yet"
    first, last = (dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") for t in (min(times), max(times)))
    return f"outputs written {first} to {last}"


def render_home(config: dict[str, Any], repo: Path, configfiles: list[str]) -> str:
    results = Path(config.get("results_dir", "results"))
    model_info = _json(results / "model" / "base" / "model.json")
    summary = _json(results / "train" / "adapter" / "training_summary.json")
    barc, inference, training, evaluation = (config.get(k, {}) for k in ("barc", "inference", "train", "evaluate"))
    split = barc.get("split", {})
    model = config.get("model", {})
    files = [f if f.startswith("--config ") else Path(f).name for f in configfiles]
    if not any(not f.startswith("--config ") for f in files):
        files.insert(0, "embedded default (config/config.yaml)")
    preset = ", ".join(files)
    if summary:
        adapter = (
            f"trained {summary.get('global_step')} steps"
            + (f", resumed from {Path(summary['resumed_from']).name}" if summary.get("resumed_from") else "")
            + (
                f", stopped by the collapse guard, kept {Path(summary.get('kept_checkpoint') or '').name}"
                if summary.get("stopped_by_guard")
                else ""
            )
        )
    else:
        adapter = "not trained yet"
    model_text = model_info.get("name") or model.get("name_or_path") or model.get("source", "?")
    if model_info.get("commit"):
        model_text += f" @ {model_info['commit'][:12]}"
    rows = [
        ("preset", preset),
        ("model", f"{model_text} (source: {model_info.get('source', model.get('source', '?'))})"),
        (
            "RL adapter",
            (
                f"{adapter}; max_steps {training.get('max_steps', '-')}, "
                f"learning rate {training.get('learning_rate', '-')}"
            ),
        ),
        (
            "BARC data",
            (
                f"{barc.get('download', {}).get('source', '?')}: {split.get('n_parts', '?')} parts x "
                f"{split.get('tasks_per_part', '?')} tasks, {inference.get('n_predictions', '?')} predictions "
                f"per task, at most {inference.get('max_tokens', '?')} new tokens"
            ),
        ),
        (
            "evaluation",
            (
                f"ARC {config.get('arc', {}).get('dataset', '?')} {config.get('arc', {}).get('split', '')}, "
                f"{evaluation.get('n_eval', '?')} predictions per task in the baseline"
            ),
        ),
        ("dates", _dates(results)),
        ("code", f"commit {_commit(repo)} (when this report was built)"),
        ("machine", f"{_machine()} (the one building this report)"),
    ]
    width = max(len(k) for k, _ in rows)
    border = "=" * (width + 2) + " " + "=" * 100
    table = [border] + [f"{k.ljust(width + 2)} {v.replace(chr(10), ' ')}" for k, v in rows] + [border]
    return (
        "arc-pipeline: multi-turn RL for the BARC induction model. What ran:\n\n" + "\n".join(table) + "\n\n"
        "Results: **Evaluation** (runs and task tables, pass@k, errors, training curves, tasks as pictures) "
        "and **BARC inference** (per-part metric tables). Logs of every job: ``" + str(results / "logs") + "``.\n"
    )


def write_home(config: dict[str, Any], repo: Path, configfiles: list[str], path: Path) -> Path:
    from arc_pipeline.io import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_home(config, repo, configfiles)
    if not path.is_file() or path.read_text() != text:
        write_text(text, path)
    return path.resolve()
