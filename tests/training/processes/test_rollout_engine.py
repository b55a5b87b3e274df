"""The colocated rollout engine's vLLM arguments beyond TRL's (arc_pipeline/training/processes/rollout_engine.py):
which settings add which argument, that TRL's engine construction receives them only while the trainer is built,
and the settings cascade attention cannot work with."""

from __future__ import annotations

import os

import pytest

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.processes.rollout_engine import engine_built_with, engine_overrides

GPU_COLOCATE = dict(use_vllm=True, vllm_importance_sampling_correction=True)


@pytest.mark.parametrize(
    ("values", "overrides"),
    [
        ({}, {}),
        ({"vllm_cascade_attention": True}, {"disable_cascade_attn": False}),
        ({"vllm_quantization": "fp8"}, {"quantization": "fp8"}),
        ({"vllm_kv_cache_dtype": "fp8"}, {"kv_cache_dtype": "fp8"}),
        (
            {"vllm_cascade_attention": True, "vllm_quantization": "fp8"},
            {"disable_cascade_attn": False, "quantization": "fp8"},
        ),
        # a two-step request: room for both steps' 32 completions at once (TRL's engine: one step's 32)
        ({"overlap_generation": True}, {}),
        ({"overlap_generation": True, "overlap_request_steps": 2}, {"max_num_seqs": 64}),
        (
            {"overlap_generation": True, "overlap_request_steps": 3, "gradient_accumulation_steps": 2},
            {"max_num_seqs": 96},
        ),
    ],
)
def test_each_setting_adds_its_vllm_argument(values, overrides):
    assert engine_overrides(TrainConfig(**GPU_COLOCATE, **values)) == overrides


def test_trls_engine_gets_the_arguments_while_the_trainer_is_built_and_only_then(monkeypatch):
    from trl.generation import vllm_generation

    built = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda *args, **kwargs: built.append(kwargs))
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    trls_own = {"model": "m", "quantization": None, "seed": 0}
    with engine_built_with({"quantization": "fp8"}):
        vllm_generation.LLM(**trls_own)
    assert "VLLM_USE_V2_MODEL_RUNNER" not in os.environ  # vLLM chooses its runner
    built.clear()
    with engine_built_with({"disable_cascade_attn": False, "quantization": "fp8"}):
        vllm_generation.LLM(**trls_own)
    # cascade attention: the V1 model runner, for as long as the process and its engine live
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    vllm_generation.LLM(**trls_own)  # after the trainer was built: TRL's arguments as they are
    with engine_built_with({}):
        vllm_generation.LLM(**trls_own)
    assert built == [{**trls_own, "disable_cascade_attn": False, "quantization": "fp8"}, trls_own, trls_own]
    with engine_built_with({"quantization": "fp8"}), pytest.raises(PipelineError, match="'bitsandbytes'"):
        vllm_generation.LLM(model="m", quantization="bitsandbytes")
    vllm_generation.LLM(model="m")  # restored after the error too
    assert built[-1] == {"model": "m"}


@pytest.mark.parametrize(
    ("values", "need"),
    [
        ({"vllm_mode": "server"}, "vllm_mode 'colocate'"),
        ({"use_vllm": False}, "use_vllm: true"),
        ({"backend": "unsloth"}, "backend trl"),
    ],
)
def test_settings_cascade_attention_cannot_work_with_are_refused(values, need):
    with pytest.raises(ValueError, match=f"vllm_cascade_attention needs .*{need}"):
        TrainConfig(vllm_cascade_attention=True, **{**GPU_COLOCATE, **values})


def test_cascade_attention_with_vllms_v2_runner_forced_is_an_error_at_the_engines_build(monkeypatch):
    from trl.generation import vllm_generation

    monkeypatch.setattr(vllm_generation, "LLM", lambda *args, **kwargs: pytest.fail("built without cascade"))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with engine_built_with({"disable_cascade_attn": False}), pytest.raises(PipelineError, match="V1 model runner"):
        vllm_generation.LLM(model="m")


@pytest.mark.parametrize(
    ("values", "need"),
    [
        ({"vllm_mode": "server"}, "vllm_mode 'colocate'"),
        ({"vllm_importance_sampling_correction": False}, "vllm_importance_sampling_correction: true"),
    ],
)
def test_an_fp8_cache_for_the_colocated_engine_needs_that_engine_and_the_correction(values, need):
    with pytest.raises(ValueError, match=f"vllm_kv_cache_dtype 'fp8' needs .*{need}"):
        TrainConfig(vllm_kv_cache_dtype="fp8", **{**GPU_COLOCATE, **values})
