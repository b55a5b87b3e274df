"""A days-long run's checkpoints survive an upgrade of the code: a marker written before a config field existed
still matches while that field holds its default, and one that recorded a field since left out of the
fingerprint still matches; a real change of what is learned still sets them aside. No training: the marker and
a checkpoint folder as the trainer leaves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arc_pipeline.training.checkpoints import (
    FINGERPRINT_FILE,
    fingerprint_defaults,
    prepare_checkpoint_dir,
    run_fingerprint,
)
from arc_pipeline.training.config import TrainConfig


@pytest.fixture
def run_files(tmp_path: Path) -> tuple[Path, Path]:
    dataset = tmp_path / "refine.parquet"
    dataset.write_bytes(b"rows")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return dataset, model


def checkpoints_of_an_older_run(folder: Path, recorded: dict) -> None:
    """The checkpoint folder a run left: its marker and one complete checkpoint."""
    (folder / "checkpoint-200").mkdir(parents=True)
    (folder / "checkpoint-200" / "trainer_state.json").write_text(json.dumps({"global_step": 200}))
    (folder / FINGERPRINT_FILE).write_text(json.dumps(recorded))


def older_marker(config: TrainConfig, dataset: Path, model: Path, without: str, recorded_extra: dict) -> dict:
    """The marker older code wrote: no ``without`` field yet; ``recorded_extra`` fields it still fingerprinted."""
    marker = run_fingerprint(config, dataset, model)
    del marker["config"][without]
    marker["config"].update(recorded_extra)
    return marker


def resume(config: TrainConfig, folder: Path, dataset: Path, model: Path) -> Path | None:
    return prepare_checkpoint_dir(folder, run_fingerprint(config, dataset, model), model, fingerprint_defaults(config))


def test_an_upgrade_that_adds_a_field_keeps_the_checkpoints(run_files, tmp_path):
    dataset, model = run_files
    folder = tmp_path / "adapter_checkpoints"
    config = TrainConfig(use_cpu=True, bf16=False)
    # the older code had no soft_overlong_cache field, and fingerprinted torch_compile (left out since)
    checkpoints_of_an_older_run(
        folder, older_marker(config, dataset, model, "soft_overlong_cache", {"torch_compile": False})
    )
    assert resume(config, folder, dataset, model) == folder / "checkpoint-200"
    assert not list(tmp_path.glob("*.set-aside-*"))
    # the marker is now the new code's: the next rerun matches it exactly
    assert json.loads((folder / FINGERPRINT_FILE).read_text()) == run_fingerprint(config, dataset, model)


def test_a_new_field_set_off_its_default_is_another_run(run_files, tmp_path):
    dataset, model = run_files
    folder = tmp_path / "adapter_checkpoints"
    default = TrainConfig(use_cpu=True, bf16=False)
    checkpoints_of_an_older_run(folder, older_marker(default, dataset, model, "soft_overlong_cache", {}))
    changed = TrainConfig(use_cpu=True, bf16=False, soft_overlong_cache=default.soft_overlong_cache + 64)
    assert resume(changed, folder, dataset, model) is None
    assert (tmp_path / "adapter_checkpoints.set-aside-1" / "checkpoint-200").is_dir()


def test_a_changed_value_of_a_recorded_field_is_another_run(run_files, tmp_path, caplog):
    dataset, model = run_files
    folder = tmp_path / "adapter_checkpoints"
    config = TrainConfig(use_cpu=True, bf16=False)
    checkpoints_of_an_older_run(folder, older_marker(config, dataset, model, "soft_overlong_cache", {}))
    changed = config.model_copy(update={"learning_rate": 2e-3, "vllm_importance_sampling_correction": True})
    assert resume(changed, folder, dataset, model) is None
    assert (tmp_path / "adapter_checkpoints.set-aside-1" / "checkpoint-200").is_dir()
    # the warning names what changed, old and new value, so a run can be set back and resumed
    [warning] = [r.getMessage() for r in caplog.records if "different run" in r.getMessage()]
    assert f"learning_rate: {config.learning_rate!r} -> 0.002" in warning
    assert "vllm_importance_sampling_correction: False -> True" in warning
    # a field the older marker lacks, at its default, is no difference; the data and model are the same
    assert "soft_overlong_cache" not in warning
    assert "dataset changed" not in warning and "model changed" not in warning


def test_kernel_choices_keep_the_checkpoints(run_files):
    dataset, model = run_files
    plain = run_fingerprint(TrainConfig(), dataset, model)
    for kernels in ({"liger_kernels": True}, {"compile_layers": True}, {"torch_compile": True}, {"fused_lora": True}):
        assert run_fingerprint(TrainConfig(**kernels), dataset, model) == plain, kernels


def test_a_preset_run_started_with_bf16_rollouts_resumes_with_fp8_ones(run_files):
    """config/barc-multiturn.yaml's rollout engine holds the policy in fp8 since 2026-12-01: a run started before
    resumes its checkpoints, as when it switches the overlap (the correction reweights both samplers)"""
    dataset, model = run_files
    corrected = {"use_vllm": True, "vllm_importance_sampling_correction": True}
    bf16 = run_fingerprint(TrainConfig(**corrected), dataset, model)
    assert run_fingerprint(TrainConfig(**corrected, vllm_quantization="fp8"), dataset, model) == bf16
    assert run_fingerprint(TrainConfig(**corrected, learning_rate=1e-3), dataset, model) != bf16
