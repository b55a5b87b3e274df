"""A LoRA adapter merged into its base model's weights: one model folder vLLM runs at the base model's speed.

vLLM applies an adapter as extra matrix products on every projection of every step (2.3-3.5x slower
evaluation of the trained refiner, issue 32); merged, the adapter costs nothing at inference. The merge
is exact in float32 (what peft's ``merge_and_unload`` computes: W + scale * B @ A); what it changes is the
rounding of the merged weights to the served dtype. A bf16 weight has 8 significant bits, so wherever an
entry's update is smaller than half a step of that weight, rounding gives the base weight back and the
update is lost; vLLM's LoRA path computes the update's contribution separately and keeps it. The merge
therefore measures, over all adapted weights, how much of the update the rounding changed
(:class:`RoundingReport`), logs it and records it in the folder's ``model.json``.

The merge streams the base model's safetensors files one at a time, one weight in float32 at a time, and
writes each file with the same tensors (no model is built): for BARC 8B it reads and writes 16 GB instead of
holding a 32 GB float32 model in host memory (26.9 s against 104.2 s and 47.9 GB RSS on one H100 host,
benchmarks/README.md, "The merge streamed, and the GPU DAGs before and after it"). On a
GPU the update is computed there; a rank-1 update (the presets' LoRA) is an outer product, one rounding per
entry, so CPU and GPU give the same bits.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.models.folder import MARKER_FILE, read_model_info

log = logging.getLogger(__name__)

# the weights the merge reads and writes; other weight formats are left out (the model stage writes safetensors)
_WEIGHTS = "*.safetensors"
_INDEX = "model.safetensors.index.json"
_OTHER_WEIGHTS = ("*.bin", "*.pth", "*.pt")
# written by the merge itself or left out; every other file of the base folder (tokenizer, chat template,
# generation config) is copied
_WRITTEN = (_WEIGHTS, _INDEX, "config.json", MARKER_FILE, *_OTHER_WEIGHTS)
# a rounding that changes more than this share of the update (in norm) fails the merge by default
# (evaluate.merge.max_rounding_error): the merged model would no longer be the adapter as trained
LARGE_ROUNDING_ERROR = 0.1
# adapter_config.json fields whose non-default values change what a merge must compute; the train stage never
# sets them, so the merge refuses them instead of merging something else
_UNSUPPORTED = {
    "use_dora": False,
    "fan_in_fan_out": False,
    "lora_bias": False,
    "bias": "none",
    "modules_to_save": None,
    "rank_pattern": {},
    "alpha_pattern": {},
    "layer_replication": None,
    "trainable_token_indices": None,
    "target_parameters": None,
}
_LORA_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")


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


@dataclass
class _RoundingTally:
    """Sums behind a :class:`RoundingReport`, one adapted weight at a time."""

    dtype: Any
    update_sq: float = 0.0
    error_sq: float = 0.0
    changed: int = 0
    vanished: int = 0

    def merge(self, weight: Any, update: Any) -> Any:
        """``weight + update`` (float32) rounded to the served dtype, counted into the tally."""
        import torch

        merged = weight + update
        rounded = merged.to(self.dtype)
        back = rounded.to(torch.float32)
        self.update_sq += float(update.double().square().sum())
        self.error_sq += float((back - merged).double().square().sum())
        moved = update != 0
        self.changed += int(moved.sum())
        self.vanished += int((moved & (back == weight)).sum())
        return rounded

    def report(self) -> RoundingReport:
        return RoundingReport(
            dtype=str(self.dtype).removeprefix("torch."),
            update_norm=self.update_sq**0.5,
            rounding_error_norm=self.error_sq**0.5,
            vanished_share=self.vanished / self.changed if self.changed else 0.0,
        )


def rounding_report(pairs: Iterable[tuple[Any, Any]], dtype: Any) -> RoundingReport:
    """Measure ``pairs``: (base weight, update) float32 tensors, as the merge rounds them to ``dtype``."""
    tally = _RoundingTally(dtype)
    for weight, update in pairs:
        tally.merge(weight, update)
    return tally.report()


def base_dtype(model_dir: Path) -> str:
    """The dtype the base model's weights are stored in (config.json), float32 when it does not say."""
    config = json.loads((model_dir / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


class MergeRoundingError(PipelineError):
    """Rounding the merged weights to the served dtype would change the adapter's update too much."""


class AdapterMergeError(PipelineError):
    """An adapter or base model folder the merge cannot merge as trained; the message names the file and field."""


@dataclass
class LoraAdapter:
    """A PEFT LoRA adapter's matrices by the base weight they update, and its scale."""

    scaling: float
    factors: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # base weight name -> (A, B)

    def update(self, name: str, device: Any) -> Any:
        """``scaling * B @ A`` for the base weight ``name``, in float32 on ``device``."""
        import torch

        lora_a, lora_b = self.factors[name]
        return (lora_b.to(device, torch.float32) @ lora_a.to(device, torch.float32)) * self.scaling


def read_lora(adapter_dir: Path) -> LoraAdapter:
    """The adapter in ``adapter_dir`` (adapter_config.json, adapter_model.safetensors), checked to be plain LoRA."""
    from safetensors import safe_open

    config_path = adapter_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterMergeError(f"{config_path}: peft_type {config.get('peft_type')!r}: only LORA adapters merge")
    for name, default in _UNSUPPORTED.items():
        if config.get(name, default) not in (default, None, {}, False):
            raise AdapterMergeError(
                f"{config_path}: {name} = {config[name]!r} is not merged by arc-pipeline merge-adapter "
                "(plain LoRA only): serve it as trained with evaluate.merge_adapter: false"
            )
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        raise AdapterMergeError(f"{adapter_dir}: no adapter_model.safetensors")
    pairs: dict[str, dict[str, Any]] = {}
    with safe_open(str(weights), framework="pt") as file:
        for key in file.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
            match = _LORA_KEY.match(key)
            if match is None:
                raise AdapterMergeError(f"{weights}: tensor {key!r} is not a LoRA factor (lora_A or lora_B)")
            pairs.setdefault(f"{match['module']}.weight", {})[match["which"]] = file.get_tensor(key)
    adapter = LoraAdapter(scaling)
    for name, pair in sorted(pairs.items()):
        if set(pair) != {"A", "B"}:
            raise AdapterMergeError(f"{weights}: {name} has lora_{''.join(pair)} but not both factors")
        adapter.factors[name] = (pair["A"], pair["B"])
    return adapter


def _weight_files(model_dir: Path) -> list[Path]:
    files = sorted(model_dir.glob(_WEIGHTS))
    if not files:
        raise AdapterMergeError(f"{model_dir}: no *.safetensors weights (the merge reads safetensors only)")
    skipped = sorted(path.name for pattern in _OTHER_WEIGHTS for path in model_dir.glob(pattern))
    if skipped:  # a copy of the base weights in another format: copied, it would be the unmerged model
        log.info("%s: not copied into the merged model: %s", model_dir, ", ".join(skipped))
    return files


def _merged_files(
    model_dir: Path, adapter: LoraAdapter, tally: _RoundingTally, device: Any
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each base weight file's tensors with the adapter's updates added, rounded to the served dtype."""
    import torch
    from safetensors import safe_open

    merged_names: set[str] = set()
    for path in _weight_files(model_dir):
        tensors: dict[str, Any] = {}
        with safe_open(str(path.resolve()), framework="pt") as file:
            for name in file.keys():  # noqa: SIM118
                weight = file.get_tensor(name)
                if name in adapter.factors:
                    update = adapter.update(name, device)
                    if tuple(update.shape) != tuple(weight.shape):
                        raise AdapterMergeError(
                            f"{path}: {name} has shape {tuple(weight.shape)}, the adapter's update "
                            f"{tuple(update.shape)}: the adapter was trained on another model"
                        )
                    base = weight.to(device, torch.float32)
                    tensors[name] = tally.merge(base, update).cpu()
                    merged_names.add(name)
                elif weight.is_floating_point():
                    tensors[name] = weight.to(tally.dtype)
                else:
                    tensors[name] = weight
        yield path, tensors
    missing = sorted(set(adapter.factors) - merged_names)
    if missing:
        raise AdapterMergeError(
            f"{model_dir}: the adapter updates {len(missing)} weights the base model lacks, "
            f"e.g. {missing[0]}: the adapter was trained on another model"
        )


def merge_device() -> Any:
    """The GPU when there is one (the rule runs on a GPU node), else the CPU."""
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def merge_adapter(
    model_dir: Path,
    adapter_dir: Path,
    out: Path,
    dtype: str = "auto",
    max_rounding_error: float = LARGE_ROUNDING_ERROR,
    device: Any = None,
) -> dict[str, Any]:
    """Write base + adapter, merged and saved in ``dtype`` (auto: the base's), into the folder ``out``.

    Raises :class:`MergeRoundingError` when rounding to ``dtype`` would change the update by more than
    ``max_rounding_error`` of its norm; the caller builds ``out`` as a staging folder it deletes on an error
    (``arc-pipeline merge-adapter``), so a refused merge leaves no model behind.

    Returns the ``model.json`` provenance (base, adapter, rounding report), also written into ``out``.
    """
    import torch
    from safetensors.torch import save_file

    served = base_dtype(model_dir) if dtype == "auto" else dtype
    adapter = read_lora(adapter_dir)
    tally = _RoundingTally(getattr(torch, served))
    out.mkdir(parents=True, exist_ok=True)
    total_size = 0  # bytes of the merged weights, for the shard index
    with torch.no_grad():
        for path, tensors in _merged_files(model_dir, adapter, tally, device or merge_device()):
            save_file(tensors, str(out / path.name), metadata={"format": "pt"})
            total_size += sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())
    report = tally.report()
    if report.relative_error > max_rounding_error:
        raise MergeRoundingError(
            f"{adapter_dir}: rounding the merged weights to {served} would change the adapter's update by "
            f"{100 * report.relative_error:.1f}% of its norm ({100 * report.vanished_share:.1f}% of the updated "
            f"entries would keep the base weight), over evaluate.merge.max_rounding_error "
            f"({100 * max_rounding_error:.0f}%): serve it as trained with evaluate.merge_adapter: false"
        )
    _write_config_and_index(model_dir, out, served, total_size)
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


def _write_config_and_index(model_dir: Path, out: Path, served: str, total_size: int) -> None:
    """The base's config.json saying the served dtype, and its shard index with the merged files' size."""
    config = json.loads((model_dir / "config.json").read_text())
    config["dtype"] = served
    if "torch_dtype" in config:
        config["torch_dtype"] = served
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    index_path = model_dir / _INDEX
    if index_path.is_file():
        index = json.loads(index_path.read_text())
        index.setdefault("metadata", {})["total_size"] = total_size
        (out / _INDEX).write_text(json.dumps(index, indent=2) + "\n")


def _copy_other_files(model_dir: Path, out: Path) -> None:
    """Tokenizer, chat template, generation config: every file the merge did not write itself."""
    for path in sorted(model_dir.iterdir()):
        if path.is_file() and not any(path.match(pattern) for pattern in _WRITTEN) and not (out / path.name).exists():
            shutil.copy(path, out / path.name)  # follows links: a `path` model folder links its files
