"""A LoRA adapter merged into its base model's weights: one model folder vLLM runs at the base model's speed.

vLLM applies an adapter as extra matrix products on every projection of every step (2.3-3.5x slower
evaluation of the trained refiner, issue 32); merged, the adapter costs nothing at inference. The merge
is exact in float32 (peft's ``merge_and_unload``: W + scale * B @ A); what it changes is the rounding of
the merged weights to the served dtype. A bf16 weight has 8 significant bits, so wherever an entry's
update is smaller than half a step of that weight, rounding gives the base weight back and the update
is lost; vLLM's LoRA path computes the update's contribution separately and keeps it. The merge
therefore measures, over all adapted weights, how much of the update the rounding changed
(:class:`RoundingReport`), logs it and records it in the folder's ``model.json``.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.models.folder import MARKER_FILE, read_model_info

log = logging.getLogger(__name__)

# files of a model folder that the merged model's own save replaces (weights, their index, config)
_REPLACED = ("*.safetensors", "*.bin", "*.pth", "*.pt", "*.safetensors.index.json", "config.json", MARKER_FILE)
# a rounding that changes more than this share of the update (in norm) fails the merge by default
# (evaluate.merge.max_rounding_error): the merged model would no longer be the adapter as trained
LARGE_ROUNDING_ERROR = 0.1


@dataclass
class RoundingReport:
    """How rounding the merged weights to the served dtype changed the adapter's update, over all adapted weights."""

    dtype: str
    update_norm: float  # ||scale * B @ A||, all adapted weights together
    rounding_error_norm: float  # ||round(W + update) - (W + update)||
    vanished_share: float  # share of entries with a non-zero update whose rounded weight equals the base weight

    @property
    def relative_error(self) -> float:
        return self.rounding_error_norm / self.update_norm if self.update_norm else 0.0


def base_dtype(model_dir: Path) -> str:
    """The dtype the base model's weights are stored in (config.json), float32 when it does not say."""
    config = json.loads((model_dir / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


def rounding_report(pairs: Any, dtype: Any) -> RoundingReport:
    """Measure ``pairs``: (base weight, update) float32 tensors, as the merge rounds them to ``dtype``."""
    import torch

    update_sq = error_sq = 0.0
    changed = vanished = 0
    for weight, update in pairs:
        merged = weight + update
        rounded = merged.to(dtype).to(torch.float32)
        update_sq += float(update.double().square().sum())
        error_sq += float((rounded - merged).double().square().sum())
        moved = update != 0
        changed += int(moved.sum())
        vanished += int((moved & (rounded == weight)).sum())
    return RoundingReport(
        dtype=str(dtype).removeprefix("torch."),
        update_norm=update_sq**0.5,
        rounding_error_norm=error_sq**0.5,
        vanished_share=vanished / changed if changed else 0.0,
    )


def _lora_pairs(model: Any) -> Any:
    """(base weight, update) of every LoRA-adapted layer of a peft model, one layer at a time."""
    from peft.tuners.lora import LoraLayer

    for module in model.modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    yield module.get_base_layer().weight.detach(), module.get_delta_weight(adapter).detach()


def _copy_other_files(model_dir: Path, out: Path) -> None:
    """Tokenizer, chat template, generation config: every file the merged model's save did not write."""
    for path in sorted(model_dir.iterdir()):
        if path.is_file() and not any(path.match(pattern) for pattern in _REPLACED) and not (out / path.name).exists():
            shutil.copy(path, out / path.name)  # follows links: a `path` model folder links its files


class MergeRoundingError(PipelineError):
    """Rounding the merged weights to the served dtype would change the adapter's update too much."""


def merge_adapter(
    model_dir: Path,
    adapter_dir: Path,
    out: Path,
    dtype: str = "auto",
    max_rounding_error: float = LARGE_ROUNDING_ERROR,
) -> dict[str, Any]:
    """Write base + adapter, merged and saved in ``dtype`` (auto: the base's), into the folder ``out``.

    Raises :class:`MergeRoundingError`, before anything is written, when rounding to ``dtype`` would change
    the update by more than ``max_rounding_error`` of its norm.

    Returns the ``model.json`` provenance (base, adapter, rounding report), also written into ``out``.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    served = base_dtype(model_dir) if dtype == "auto" else dtype
    # float32 for the merge itself: the update is added exactly; one rounding at the end, to the served dtype
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    with torch.no_grad():
        report = rounding_report(_lora_pairs(model), getattr(torch, served))
        if report.relative_error > max_rounding_error:
            raise MergeRoundingError(
                f"{adapter_dir}: rounding the merged weights to {served} would change the adapter's update by "
                f"{100 * report.relative_error:.1f}% of its norm ({100 * report.vanished_share:.1f}% of the updated "
                f"entries would keep the base weight), over evaluate.merge.max_rounding_error "
                f"({100 * max_rounding_error:.0f}%): serve it as trained with evaluate.merge_adapter: false"
            )
        merged = model.merge_and_unload()
    merged = merged.to(getattr(torch, served))
    merged.save_pretrained(str(out))
    _copy_other_files(model_dir, out)
    base_info = read_model_info(model_dir)
    base_name = str(base_info.get("name") or model_dir.resolve().name)
    log.info(
        "merged %s into %s (%s): rounding changed the update by %.1f%% of its norm; %.1f%% of the updated "
        "entries kept the base weight",
        adapter_dir,
        base_name,
        served,
        100 * report.relative_error,
        100 * report.vanished_share,
    )
    info = {
        "source": "merged",
        "name": f"{base_name} + {adapter_dir.name} (merged)",
        "base": base_info,
        "base_dir": str(model_dir),
        "adapter": str(adapter_dir),
        "dtype": served,
        "rounding": {**asdict(report), "relative_error": report.relative_error},
    }
    (out / MARKER_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info
