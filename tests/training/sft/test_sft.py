"""Stage sft on the tiny model, CPU: TRL's SFTTrainer as the stage builds it learns only the completion,
the stage writes an adapter and metrics, and a longer rerun resumes from the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from training_helpers import REFINE_TEXT, refinement_rows

from arc_pipeline.io import write_table
from arc_pipeline.schemas import SFT_DATASET_SCHEMA, TRAINING_METRICS_SCHEMA
from arc_pipeline.training.sft.config import SftConfig

CPU = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "batch_size": 2,
    "gradient_accumulation_steps": 1,
    "learning_rate": 1e-3,
    "warmup_ratio": 0.0,
    "save_steps": 1,
    "report_to": [],
    "max_seq_length": 4096,
}


@pytest.fixture(scope="module")
def sft_dataset(tiny_model, tmp_path_factory) -> Path:
    """Two SFT rows: the recolor task's refinement prompt (rendered, BOS included) and a solving answer."""
    from arc_pipeline.models.folder import load_tokenizer

    rows = [
        {
            "task_id": row["task_id"],
            "prompt": row["prompt"],
            "completion": REFINE_TEXT,
            "prediction_id": f"{row['prediction_id']}/t2/r0/s0",
            "source_prediction_id": row["prediction_id"],
            "prompt_tokens": row["prompt_tokens"],
            "completion_tokens": 20,
        }
        for row in refinement_rows(load_tokenizer(tiny_model), 2)
    ]
    path = tmp_path_factory.mktemp("sft") / "sft.parquet"
    write_table(rows, path, SFT_DATASET_SCHEMA)
    return path


def test_the_loss_covers_the_completion_and_its_end_token_only(tiny_model, sft_dataset, tmp_path):
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.training.sft.trainer import build_trainer

    trainer = build_trainer(SftConfig(**CPU), sft_dataset, tiny_model, tmp_path)
    tokenizer = load_tokenizer(tiny_model)
    batch = trainer.data_collator([trainer.train_dataset[0]])  # what the loss sees
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    prompt = pl.read_parquet(sft_dataset)["prompt"][0]
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]  # rendered: its one BOS included
    assert ids[: len(prompt_ids)] == prompt_ids  # one BOS: the stage stripped the rendered one, TRL added it back
    assert labels[: len(prompt_ids)] == [-100] * len(prompt_ids)
    learned = ids[len(prompt_ids) :]
    assert labels[len(prompt_ids) :] == learned
    assert tokenizer.decode(learned) == REFINE_TEXT + tokenizer.eos_token  # the answer, then its end


def run_sft(tiny_model: Path, dataset: Path, folder: Path, max_steps: int) -> int:
    from arc_pipeline.cli import main as cli_main

    config = json.dumps(dict(CPU, max_steps=max_steps))
    return cli_main(
        [
            "sft",
            "--dataset",
            str(dataset),
            "--model",
            str(tiny_model),
            "--output",
            str(folder / "adapter"),
            "--metrics",
            str(folder / "metrics.parquet"),
            "--checkpoint-dir",
            str(folder / "checkpoints"),
            "--config-json",
            config,
        ]
    )


@pytest.mark.slow
def test_the_stage_writes_an_adapter_and_a_longer_rerun_resumes(tiny_model, sft_dataset, tmp_path):
    assert run_sft(tiny_model, sft_dataset, tmp_path, max_steps=1) == 0
    adapter = tmp_path / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file()
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == SftConfig().lora_r
    assert (tmp_path / "checkpoints" / "checkpoint-1" / "trainer_state.json").is_file()

    assert run_sft(tiny_model, sft_dataset, tmp_path, max_steps=2) == 0  # max_steps is not in the fingerprint
    summary = json.loads((adapter / "training_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["resumed_from"].endswith("checkpoint-1")
    assert summary["stage"] == "sft" and summary["rows"] == 2
    metrics = pl.read_parquet(tmp_path / "metrics.parquet")
    assert metrics.schema.names() == TRAINING_METRICS_SCHEMA.names
    losses = metrics.filter(pl.col("name") == "loss")
    assert losses["step"].to_list() == [1, 2]  # the resumed run's history holds the first run's step


@pytest.mark.slow
def test_grpo_continues_the_sft_adapter_of_its_own_shape_only(tiny_model, sft_dataset, refinement_dataset, tmp_path):
    """train.init_adapter: sft. One GRPO step at a negligible rate ends where the SFT adapter began (a fresh
    LoRA's B matrices are zero; these are not); an adapter of another shape is refused, naming its file."""
    from safetensors.torch import load_file
    from test_grpo import cpu_config
    from torch.testing import assert_close
    from transformers import AutoModelForCausalLM

    from arc_pipeline.errors import PipelineError
    from arc_pipeline.training.base_model import continue_adapter
    from arc_pipeline.training.grpo import train
    from arc_pipeline.training.sft.trainer import train_sft

    sft = tmp_path / "sft"
    train_sft(SftConfig(**dict(CPU, max_steps=1)), sft_dataset, tiny_model, sft / "adapter", sft / "metrics.parquet")
    start = load_file(sft / "adapter" / "adapter_model.safetensors")
    assert any(name.endswith("lora_B.weight") and weights.abs().sum() > 0 for name, weights in start.items())

    config = cpu_config(init_adapter="sft", max_steps=1, learning_rate=1e-12)
    rl = tmp_path / "rl"
    train(
        config, refinement_dataset(2), tiny_model, rl / "adapter", rl / "metrics.parquet", init_adapter=sft / "adapter"
    )
    assert_close(load_file(rl / "adapter" / "adapter_model.safetensors"), start, atol=1e-6, rtol=0)

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    with pytest.raises(PipelineError, match=r"adapter_config.json: the adapter's shape .* give sft and train the same"):
        continue_adapter(base, sft / "adapter", cpu_config(lora_r=2))
