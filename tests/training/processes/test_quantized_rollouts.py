"""train.vllm_quantization (issue 52's fp8 rollouts): the weight sync through vLLM's in-place reload puts the
policy's weights, under TRL's names, into a real engine (on this CPU without quantization: vLLM's fp8 kernels are
CUDA's; the reload path is the same one, and the GPU run quantizes in it); TRL's engine arguments get the setting
unless TRL chose a quantization of its own; the settings it cannot work with are refused."""

from __future__ import annotations

import textwrap

import pytest
from training_helpers import result_of_engine_script

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.processes.quantized_rollouts import with_quantization

RELOAD_SCRIPT = textwrap.dedent(
    """
    import json, sys, types
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import LLM, SamplingParams
    from arc_pipeline.training.processes.quantized_rollouts import sync_by_reload

    model_dir, prompt = sys.argv[1], [0, 7, 8, 9, 10, 11, 12, 13]
    # a tenth of the memory: on the CPU it is what the engine reserves, beside the suite's other worker
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
              gpu_memory_utilization=0.1)
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)

    def engine_logprobs():
        out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0].prompt_logprobs
        return [next(iter(token.values())).logprob for token in out[1:]]

    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = engine_logprobs()
    with torch.no_grad():  # a training step's worth of change in two projections of every layer
        for name, parameter in policy.named_parameters():
            if "q_proj" in name or "down_proj" in name:
                parameter.add_(torch.randn_like(parameter) * 0.05)
        ids = torch.tensor([prompt])
        expected = policy(ids).logits.log_softmax(-1)[0, :-1].gather(1, ids[0, 1:, None])[:, 0].tolist()
    names = []

    def iter_named_params():  # TRL's order and names: the HF model's, as _iter_named_params yields them
        for name, parameter in policy.named_parameters():
            names.append(name)
            yield name, parameter.data

    engine = types.SimpleNamespace(llm=llm, _iter_named_params=iter_named_params)
    sync_by_reload(engine)
    engine.sync_weights()
    print("RESULT " + json.dumps({"before": before, "after": engine_logprobs(), "expected": expected,
                                  "synced": len(names), "parameters": len(list(policy.parameters()))}))
    """
)


@pytest.mark.slow
def test_the_sync_by_reload_puts_the_policys_weights_in_a_real_engine(tiny_model, tmp_path):
    read = result_of_engine_script(RELOAD_SCRIPT, tiny_model, tmp_path)
    assert read["synced"] == read["parameters"]  # every weight went through the reload
    assert read["after"] == pytest.approx(read["expected"], abs=1e-4)  # the engine now computes the new policy
    assert max(abs(a - b) for a, b in zip(read["after"], read["before"], strict=True)) > 0.05


def test_trls_engine_arguments_get_the_setting_unless_trl_chose_a_quantization():
    assert with_quantization({"model": "m", "quantization": None}, "fp8") == {"model": "m", "quantization": "fp8"}
    with pytest.raises(PipelineError, match="TRL builds the rollout engine with quantization 'bitsandbytes'"):
        with_quantization({"quantization": "bitsandbytes"}, "fp8")


GPU_COLOCATE = dict(use_vllm=True, vllm_importance_sampling_correction=True)


@pytest.mark.parametrize(
    ("values", "need"),
    [
        ({"vllm_mode": "server"}, "vllm_mode 'colocate'"),
        ({"use_vllm": False}, "use_vllm: true"),
        ({"vllm_enable_sleep_mode": True}, "vllm_enable_sleep_mode: false"),
        ({"vllm_importance_sampling_correction": False}, "vllm_importance_sampling_correction: true"),
        ({"backend": "unsloth"}, "backend trl"),
    ],
)
def test_settings_fp8_rollouts_cannot_work_with_are_refused(values, need):
    TrainConfig(vllm_quantization="fp8", **GPU_COLOCATE)  # the combination it is for
    with pytest.raises(ValueError, match=f"vllm_quantization 'fp8' needs .*{need}"):
        TrainConfig(vllm_quantization="fp8", **{**GPU_COLOCATE, **values})
