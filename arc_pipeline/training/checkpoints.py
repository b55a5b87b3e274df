"""Training checkpoints: which run they belong to, which one to resume from, which one to keep.

Checkpoints (``checkpoint-N`` folders, written by the trainer every ``save_steps``) lie in a folder
beside the output, with ``run_fingerprint.json`` saying which run wrote them: a rerun resumes from the
last complete one unless the config, data or model changed, in which case they are moved aside (never
deleted). After the collapse guard fires, :func:`best_checkpoint` picks the one to keep as the output.

No heavy import here: the trainer's files are read as JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from arc_pipeline.io import replace_folder

log = logging.getLogger(__name__)

FINGERPRINT_FILE = "run_fingerprint.json"
SUMMARY_FILE = "training_summary.json"  # in the adapter folder: what the run did and its config
REWARD_KEY = "reward"  # the trainer's logged mean reward of a window
# Config fields that do not change what is learned: changing them keeps the checkpoints.
_NOT_IN_FINGERPRINT = {
    "report_to",
    "run_name",
    "logging_steps",
    "log_completions",
    "save_steps",
    "save_total_limit",
    "execution_workers",
    "collapse_guard",
    "max_steps",
    # where generation runs and how the job stops its processes, not what is learned
    "vllm_mode",
    "vllm_server_gpus",
    "vllm_server_tensor_parallel_size",
    "vllm_server_gpu_memory_utilization",
    "vllm_server_kv_cache_dtype",
    "vllm_kv_cache_dtype",  # the colocated engine's cache, as the server's above
    # the colocated engine's weights in fp8: another sampler, which the correction reweights, as the overlap below
    "vllm_quantization",
    "vllm_server_timeout_s",
    "stop_grace_s",
    # one update of staleness, reweighted: a run may switch it and resume (left out, older checkpoints match)
    "overlap_generation",
    "overlap_request_steps",
    "overlap_decode_ahead",
    "overlap_training_first",
    "overlap_switch_interval_ms",
    # the same ratio from another forward of the same weights
    "importance_sampling_from_loss_forward",
    # how the loss's gradient is computed, not what it is (and left out, checkpoints written before the field
    # existed still match)
    "backward_chunk_tokens",
    "share_prompt_forward",
    # which kernels compute the same passes
    "torch_compile",
    "compile_layers",
    "liger_kernels",
    "fused_lora",
    "fused_lora_kernels",
    "vllm_cascade_attention",
}
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WHOLE_FILE_BYTES = 4 << 20  # files up to this size are hashed whole; larger ones (weights) sampled
_SAMPLE_BYTES = 1 << 20


def default_checkpoint_dir(output: Path) -> Path:
    """Beside the output, so a failed job's cleanup of its outputs never deletes the checkpoints."""
    return output.with_name(f"{output.name}_checkpoints")


# ------------------------------------------------------------------ which run


def model_content_digest(model_dir: str | os.PathLike) -> str:
    """A digest of the model folder's content, independent of where the folder lies.

    Small files (configs, tokenizer) are hashed whole; a weight file by its size and its first and last
    MiB, which tells different models or fine-tunes apart without reading gigabytes. ``model.json``
    (provenance and build time, not weights) is left out. Symlinks (``source: path``) are followed.
    """
    root = Path(model_dir)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        relative = path.relative_to(root).as_posix()
        if relative == "model.json":
            continue
        size = path.stat().st_size
        digest.update(f"{relative}\0{size}\0".encode())
        with path.open("rb") as handle:
            if size <= _WHOLE_FILE_BYTES:
                digest.update(handle.read())
            else:
                digest.update(handle.read(_SAMPLE_BYTES))
                handle.seek(size - _SAMPLE_BYTES)
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()


class StepLimited(Protocol):
    """A training stage's config (``TrainConfig``, ``SftConfig``): what the end of its run is read from."""

    max_steps: int


def run_fingerprint(
    config: BaseModel,
    dataset_path: str | os.PathLike,
    model_dir: str | os.PathLike,
    not_in_fingerprint: Collection[str] = frozenset(_NOT_IN_FINGERPRINT),
) -> dict:
    """What identifies a training run: checkpoints of a different run must not be resumed.

    Content only, no absolute path: results/ copied or moved elsewhere (scratch, another clone or
    mount point) keeps its checkpoints. ``not_in_fingerprint``: the config fields that do not change what
    is learned (GRPO's by default; the SFT stage passes its own).
    """
    digest = hashlib.sha256(Path(dataset_path).read_bytes()).hexdigest()
    return {
        "config": config.model_dump(mode="json", exclude=set(not_in_fingerprint)),
        "dataset_sha256": digest,
        "model_sha256": model_content_digest(model_dir),
    }


def fingerprint_defaults(
    config: BaseModel, not_in_fingerprint: Collection[str] = frozenset(_NOT_IN_FINGERPRINT)
) -> dict:
    """The fingerprint's config part as the config class's defaults would give it: a field added to the config
    after a marker was written matches that marker while it holds its default (the value that reproduces the
    code that wrote the marker)."""
    return type(config).model_construct().model_dump(mode="json", exclude=set(not_in_fingerprint))


def _config_matches(recorded: Any, current: Any, defaults: Any) -> bool:
    """``recorded`` equals ``current``, where a key ``recorded`` lacks counts as equal while ``current`` holds
    that key's default; nested sections the same way."""
    if not (isinstance(recorded, dict) and isinstance(current, dict)):
        return recorded == current
    defaults = defaults if isinstance(defaults, dict) else {}
    if set(recorded) - set(current):
        return False  # a field the code no longer has: another run
    for key, value in current.items():
        if key in recorded:
            if not _config_matches(recorded[key], value, defaults.get(key)):
                return False
        elif key not in defaults or defaults[key] != value:
            return False
    return True


def _same_run(
    recorded: dict,
    fingerprint: dict,
    model_dir: str | os.PathLike | None,
    defaults: dict | None = None,
    not_in_fingerprint: Collection[str] = frozenset(_NOT_IN_FINGERPRINT),
) -> bool:
    if recorded == fingerprint:
        return True
    if defaults is not None and isinstance(recorded.get("config"), dict):
        # a marker of older code: fields left out of the fingerprint since, fields added since at their default
        config = {k: v for k, v in recorded["config"].items() if k not in not_in_fingerprint}
        rest = {k: v for k, v in recorded.items() if k != "config"}
        if rest == {k: v for k, v in fingerprint.items() if k != "config"} and _config_matches(
            config, fingerprint.get("config"), defaults
        ):
            return True
    # A marker from before content fingerprints recorded the model's absolute path instead.
    if "model" in recorded and "model_sha256" not in recorded and model_dir is not None:
        others = {k: v for k, v in fingerprint.items() if k != "model_sha256"}
        return {k: v for k, v in recorded.items() if k != "model"} == others and recorded["model"] == str(
            Path(model_dir).resolve()
        )
    return False


def _differences(recorded: dict, fingerprint: dict, defaults: dict | None, limit: int = 8) -> str:
    """What separates the run that left a marker from this one, in words: the config fields whose values differ
    (``field: old -> new``; a field the marker lacks only when off its default), a changed dataset or model; at
    most ``limit`` config fields named."""
    old_config, new_config = recorded.get("config") or {}, fingerprint.get("config") or {}
    defaults = defaults or {}
    absent = object()
    fields = [
        f"{key}: {old_config.get(key, '(absent)')!r} -> {new_config.get(key, '(absent)')!r}"
        for key in sorted(set(old_config) | set(new_config))
        if old_config.get(key, absent) != new_config.get(key, absent)
        and not (key not in old_config and defaults.get(key, absent) == new_config.get(key))
    ]
    if len(fields) > limit:
        fields = [*fields[:limit], f"and {len(fields) - limit} more fields"]
    parts = fields
    for key, what in (("dataset_sha256", "the refinement dataset"), ("model_sha256", "the model")):
        if key in recorded and recorded.get(key) != fingerprint.get(key):
            parts.append(f"{what} changed")
    return "; ".join(parts) or "the marker's format"


def set_aside(folder: Path) -> Path:
    """Rename ``folder`` to a free ``<name>.set-aside-N`` beside it (checkpoints are never deleted)."""
    n = 1
    while (target := folder.with_name(f"{folder.name}.set-aside-{n}")).exists():
        n += 1
    os.rename(folder, target)
    return target


def prepare_checkpoint_dir(
    folder: Path,
    fingerprint: dict,
    model_dir: str | os.PathLike | None = None,
    defaults: dict | None = None,
    not_in_fingerprint: Collection[str] = frozenset(_NOT_IN_FINGERPRINT),
) -> Path | None:
    """Create the checkpoint folder; return the checkpoint to resume from, if any.

    Checkpoints left by a run with another fingerprint (config, data or model changed) are moved aside,
    never deleted: days of GPU time may be in them, and the change may have been a mistake. With ``defaults``
    (:func:`fingerprint_defaults`), checkpoints of a run that older code started still match: an upgrade that
    adds a config field at its default, or leaves a field out of the fingerprint, keeps a days-long run's
    checkpoints.
    """
    marker = folder / FINGERPRINT_FILE
    recorded = json.loads(marker.read_text()) if marker.is_file() else None
    if recorded is not None and not _same_run(recorded, fingerprint, model_dir, defaults, not_in_fingerprint):
        moved = set_aside(folder)
        # named, so that a change made by mistake (or a preset's new default) can be set back and the run resumed
        log.warning(
            "%s: checkpoints belong to a different run (%s): moved them to %s and starting afresh; to resume them "
            "instead, set those values back and move the folder back (delete it yourself if it is not needed)",
            folder,
            _differences(recorded, fingerprint, defaults),
            moved,
        )
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    resume = last_complete_checkpoint(folder)
    if resume is not None:
        log.info("resuming from %s", resume)
    return resume


# ------------------------------------------------------------------ which checkpoint


def checkpoints(folder: str | Path) -> dict[int, Path]:
    """``checkpoint-N`` folders by step."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    found = {}
    for entry in folder.iterdir():
        match = _CHECKPOINT.match(entry.name)
        if match and entry.is_dir():
            found[int(match.group(1))] = entry
    return found


def _whole_state(path: Path) -> bool:
    """The trainer writes trainer_state.json last and in place: a kill while writing it leaves it cut."""
    try:
        return "global_step" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def last_complete_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The newest ``checkpoint-N`` whose trainer state is whole (a kill mid-save leaves none, or a cut one)."""
    for _, path in sorted(checkpoints(folder).items(), reverse=True):
        if _whole_state(path / "trainer_state.json"):
            return path
    return None


def reached_the_end(checkpoint: Path, config: StepLimited) -> bool:
    """Whether the checkpoint is the run's last step (max_steps, or the planned steps of its epochs)."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    step = int(state.get("global_step", 0))
    end = config.max_steps if config.max_steps > 0 else int(state.get("max_steps") or 0)
    return end > 0 and step >= end


def best_checkpoint(folder: str | Path, log_history: list[dict[str, Any]], before_step: int | None) -> Path | None:
    """The checkpoint with the highest mean reward over the windows since the previous checkpoint.

    Only checkpoints saved before ``before_step`` count; None when there is none with a logged reward.
    """
    found = sorted(checkpoints(folder).items())
    best: tuple[float, int, Path] | None = None
    previous = 0
    for step, path in found:
        if before_step is not None and step >= before_step:
            break
        rewards = [
            entry[REWARD_KEY]
            for entry in log_history
            if REWARD_KEY in entry and previous < entry.get("step", 0) <= step and not math.isnan(entry[REWARD_KEY])
        ]
        previous = step
        if rewards:
            mean = sum(rewards) / len(rewards)
            if best is None or mean > best[0]:
                best = (mean, step, path)
    return None if best is None else best[2]


def copy_adapter(checkpoint: Path, folder: Path) -> None:
    """Copy a checkpoint's adapter (weights, configs, tokenizer, model card, training arguments) into
    ``folder``, without the trainer's state: the files ``trainer.save_model`` would have written."""
    for entry in checkpoint.iterdir():
        wanted = entry.name.startswith("adapter_") or entry.suffix in (".json", ".jinja", ".md")
        wanted = wanted or entry.name == "training_args.bin"
        if entry.is_file() and wanted and entry.name not in ("trainer_state.json", "rng_state.pth", FINGERPRINT_FILE):
            shutil.copy2(entry, folder / entry.name)


def write_adapter(output: Path, save_model: Callable[[Path], None] | None, kept: Path | None, summary: dict) -> None:
    """Write the run's adapter folder atomically: the trainer's final adapter (``save_model(folder)``) or, when
    ``kept`` is set, that checkpoint's adapter, plus ``summary`` as :data:`SUMMARY_FILE`."""
    with replace_folder(output) as staging:
        if kept is None:
            assert save_model is not None, "write_adapter needs save_model or a kept checkpoint"
            save_model(staging)
        else:
            copy_adapter(kept, staging)
        (staging / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
