"""The home page of ``snakemake --report``: what ran (preset, model, adapter, dates, code, machine).

Snakemake renders the workflow description with only the config at hand, so the Snakefile writes this
text to a file when it is parsed (``.snakemake/arc-pipeline/report-home.rst``) from the run's typed config
(``WORKFLOW`` of ``rules/common.smk``, a :class:`~arc_pipeline.config.workflow.WorkflowConfig`) and what the
results folder records: ``model/base/model.json`` (where the model came from), the adapter's
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

from arc_pipeline.config.workflow import WorkflowConfig
from arc_pipeline.stages.arc_tasks import ArcTasksConfig
from arc_pipeline.stages.model import ModelStageConfig
from arc_pipeline.training.config import TrainConfig


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


def _preset(configfiles: list[str]) -> str:
    files = [f if f.startswith("--config ") else Path(f).name for f in configfiles]
    if not any(not f.startswith("--config ") for f in files):
        files.insert(0, "embedded default (config/config.yaml)")
    return ", ".join(files)


def _adapter(summary: dict[str, Any], train: TrainConfig) -> str:
    """What the training summary on disk records (absent before ``train`` ran), then the config's plan."""
    steps = f"max_steps {train.max_steps}" if train.max_steps > 0 else f"num_train_epochs {train.num_train_epochs:g}"
    plan = f"{steps}, learning rate {train.learning_rate:g}"
    if not summary:
        return f"not trained yet; {plan}"
    done = f"trained {summary['global_step']} steps" if "global_step" in summary else "trained (steps not recorded)"
    if summary.get("resumed_from"):
        done += f", resumed from {Path(summary['resumed_from']).name}"
    if summary.get("stopped_by_guard"):
        done += f", stopped by the collapse guard, kept {Path(summary.get('kept_checkpoint') or '').name}"
    return f"{done}; {plan}"


def _model(model_info: dict[str, Any], model: ModelStageConfig) -> str:
    """``model.json`` once the model stage ran; before that the config (name_or_path means nothing for the
    built models, tiny and random)."""
    if model_info.get("name"):
        text = str(model_info["name"])
    elif model.source in ("hub", "path"):
        text = model.name_or_path
    else:
        text = "not built yet"
    if model_info.get("commit"):
        text += f" @ {model_info['commit'][:12]}"
    return f"{text} (source: {model_info.get('source', model.source)})"


def _barc(config: WorkflowConfig) -> str:
    split, inference = config.barc.split, config.inference
    return (
        f"{config.barc.download.source}: {split.n_parts} parts x {split.tasks_per_part} tasks, "
        f"{inference.n_predictions} predictions per task, at most {inference.max_tokens} new tokens"
    )


def _arc_tasks(tasks: ArcTasksConfig) -> str:
    if tasks.source == "canary":
        chosen = f"canary held-out tasks ({tasks.canary.tasks}, seed {tasks.canary.seed})"
    elif tasks.source == "kaggle":
        chosen = f"Kaggle {Path(tasks.challenges_path or 'challenges').name}"
    else:
        chosen = f"ARC {tasks.dataset} {tasks.split}"
    if tasks.task_ids:
        chosen += f", {len(tasks.task_ids)} chosen tasks"
    elif tasks.max_tasks is not None:
        chosen += f", first {tasks.max_tasks} tasks"
    return chosen


def render_home(config: WorkflowConfig, repo: Path, configfiles: list[str]) -> str:
    """The page as rst. ``config`` is the typed run (``WORKFLOW`` of ``rules/common.smk``), so a renamed
    field fails here at once instead of printing a placeholder."""
    results = Path(config.results_dir)
    model_info = _json(results / "model" / "base" / "model.json")
    summary = _json(results / "train" / "adapter" / "training_summary.json")
    rows = [
        ("preset", _preset(configfiles)),
        ("model", _model(model_info, config.model)),
        ("RL adapter", _adapter(summary, config.train)),
        ("BARC data", _barc(config)),
        (
            "evaluation",
            f"{_arc_tasks(config.arc_tasks)}, {config.evaluate.n_eval} predictions per task in the baseline",
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


def write_home(config: WorkflowConfig, repo: Path, configfiles: list[str], path: Path) -> Path:
    from arc_pipeline.io import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_home(config, repo, configfiles)
    if not path.is_file() or path.read_text() != text:
        write_text(text, path)
    return path.resolve()
