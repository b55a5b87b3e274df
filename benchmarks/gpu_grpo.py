"""Where a full-length 8B GRPO step's time goes, and what each speed lever changes, side by side.

Every variant runs the pipeline's own ``train`` (arc_pipeline.training.grpo.train) for a few steps in its own
process (its own CUDA context and colocated vLLM engine), on the same model and prompts:

* the model: random weights of Llama-3.1-8B's shape without the answer-format warm-up, so that no completion
  ever ends its turn: every one runs to ``max_completion_length`` and stays in the loss
  (``mask_truncated_completions`` off);
* the prompts: refinement prompts of random tasks, about ``--grid-side`` x ``--grid-side`` grids (1.6k tokens
  at side 10, measured on the H100; the smoke preset's refinement prompts are about 2.4k, so use a larger side to
  match them);
* the settings (``baseline``): TrainConfig's defaults, which are ``config/barc-multiturn.yaml``'s train section
  (LoRA rank 1, 32 completions over 4 accumulation steps, colocated vLLM at 0.3, gradient checkpointing, beta
  0.02) less its ``backward_chunk_tokens: 2100`` (the variant ``chunked-2k``), then each lever on top.

Per variant it prints the mean over the steps after the first (which holds the engine's warm-up), and with
``overlap_generation`` over whole request windows only (the last ones train with less or nothing decoded beside
them; ``steady_steps``), of each phase (arc_pipeline/training/phases.py), tokens per step, model TFLOP/s and their
share of the GPUs' dense bf16 peak (benchmarks/gpu_peaks.py: model FLOP utilisation of the training passes and of
the whole step), and peak memory:

    python benchmarks/gpu_grpo.py --work /tmp/grpo-bench --variants baseline,sleep-0.5 --steps 4

The model and prompts are built once under ``--work`` and reused; so are the compile caches, so the first
variant's engine start is cold and the others' warm.

Variants with several GPUs (``dp-2``, ``dp-4``, ``server-1+1``, ``server-tp2+2``, ``server-dp2+2``, the
``-overlap`` ones, whose server decodes the next step while the ranks train, and the ``-overlap2`` ones, whose
server request holds the two steps after the next) run through
the stage's own launcher (arc_pipeline/training/launch.py) on the GPUs ``CUDA_VISIBLE_DEVICES`` names; for every
variant the GPUs' memory is sampled with nvidia-smi into ``<work>/<variant>/gpu-memory.jsonl`` and the table
shows each GPU's highest use while step 3 ran and while the last step ran, and, over the measured steps, its SM
clock, power draw, temperature and clock-limit reasons, with the driver (``gpu-host.json``): two hosts' GPUs of one
name gave one variant's step 11.6 and 14.2 s (benchmarks/README.md, twentieth lease). Separate invocations with disjoint
``CUDA_VISIBLE_DEVICES`` may run at once on one host, sharing ``--work`` once its inputs exist
(``--report-only`` builds them). ``chunked-2k-overlap`` is the overlap on one GPU: the colocated engine decodes the
next step on its own CUDA stream while this step trains.

``--stack-samples STEP`` samples the Python stacks of every thread of a one-process variant from step STEP to its
end (``engine_stacks.py``; the training thread, the colocated engine's and the overlap's generation thread) and
prints each thread's most frequent ones after the table: where the training thread's host time goes beside the
decode (issue 52: 11 s of training beside it against 6-7 s alone, benchmarks/README.md, sixteenth lease). The
sampler slows the steps it watches: a sampled variant's figures are not comparable with an unsampled one's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_bench_inputs beside this file

import engine_stacks
from gpu_bench_inputs import build_inputs
from gpu_peaks import utilisation_percent

log = logging.getLogger("gpu_grpo")

# The preset's train section with the benchmark's own changes: every completion is full length and stays in the
# loss, no checkpoints, no tracker.
BASE_SETTINGS: dict[str, Any] = {
    "use_vllm": True,
    "mask_truncated_completions": False,
    "save_steps": 10_000,
    "logging_steps": 1,
    "report_to": ["none"],
}
# the importance-sampling correction computed from the loss's forward, per-token ratios
LOSS_FORWARD_CORRECTION: dict[str, Any] = {
    "vllm_importance_sampling_correction": True,
    "vllm_importance_sampling_mode": "token_truncate",
    "importance_sampling_from_loss_forward": True,
}
# overlapped generation with that correction
FUSED_OVERLAP: dict[str, Any] = {"overlap_generation": True, **LOSS_FORWARD_CORRECTION}
# the presets' one-GPU pair: fp8 rollout weights, each LoRA projection fused with its base, Triton rank-1 kernels
FP8_TRITON_LORA: dict[str, Any] = {"vllm_quantization": "fp8", "fused_lora": True, "fused_lora_kernels": "triton"}
# the presets' one-GPU step until 2026-12-02: the preset's chunks, overlapped one step per request, with that pair
OVERLAP_FP8_TRITON_STEP: dict[str, Any] = {"backward_chunk_tokens": 2100, **FUSED_OVERLAP, **FP8_TRITON_LORA}
# the presets' one-GPU step from 2026-12-02 to 2026-12-03: two steps per request beside training, an fp8 KV cache
TWO_STEP_REQUESTS: dict[str, Any] = {
    **OVERLAP_FP8_TRITON_STEP,
    "overlap_request_steps": 2,
    "vllm_kv_cache_dtype": "fp8",
}
# the presets' one-GPU step since (config/barc-multiturn.yaml's train settings; tests/test_gpu_grpo_variants.py holds
# them equal): four steps per request, decoded alone when the first of them needs it
PRESETS_STEP: dict[str, Any] = {**TWO_STEP_REQUESTS, "overlap_request_steps": 4, "overlap_decode_ahead": False}
# a server on 2 GPUs and 2 training processes, the preset's chunks
SERVER_2_RANKS_2: dict[str, Any] = {
    "backward_chunk_tokens": 2100,
    "vllm_mode": "server",
    "vllm_server_gpus": 2,
    "training_processes": 2,
}
# that layout with two steps per server request and the correction from the loss's forward; the server as 2
# replicas or as one TP-2 engine
TWO_REPLICAS_OVERLAP_2: dict[str, Any] = {**SERVER_2_RANKS_2, **FUSED_OVERLAP, "overlap_request_steps": 2}
TP2_OVERLAP_2: dict[str, Any] = {**TWO_REPLICAS_OVERLAP_2, "vllm_server_tensor_parallel_size": 2}
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    # before the shared prompt forward: every completion's row runs with its whole prompt
    "unshared": {"share_prompt_forward": False},
    # the engine frees its weights and KV cache while the policy trains, so it can take more while it samples
    "sleep-0.5": {"vllm_enable_sleep_mode": True, "vllm_gpu_memory_utilization": 0.5},
    "vllm-0.45": {"vllm_gpu_memory_utilization": 0.45},
    "sleep-0.5-mb16": {
        "vllm_enable_sleep_mode": True,
        "vllm_gpu_memory_utilization": 0.5,
        "gradient_accumulation_steps": 2,
    },
    # no recomputation: activations of a 2.6k-token completion are ~16 GB without checkpointing, so one per pass.
    # A micro-batch of 1 changes bnpo's normalisation (per completion instead of per 8): speed only
    "no-ckpt-mb1": {"gradient_checkpointing": False, "gradient_accumulation_steps": 32},
    "no-ckpt-mb2": {"gradient_checkpointing": False, "gradient_accumulation_steps": 16},
    # with the shared prompt pass once per micro-batch: chunks of one (1.1k) or two (2.1k) full-length
    # completions without checkpointing
    "chunked-1k": {"backward_chunk_tokens": 1100},
    "chunked-2k": {"backward_chunk_tokens": 2100},
    # the same, a second train job started at the same moment on another GPU of the host (each its own rendezvous)
    "chunked-2k-twin": {"backward_chunk_tokens": 2100},
    # the same compute with the preset's micro-batch and loss: chunks of at most N tokens without checkpointing
    "chunked-4k": {"backward_chunk_tokens": 4096},
    "chunked-6k": {"backward_chunk_tokens": 6144},
    # sleep mode gives the engine's memory to training, so two 2.6k-token completions fit a chunk
    "sleep-chunked-6k": {"vllm_enable_sleep_mode": True, "backward_chunk_tokens": 6144},
    "chunked-4k-compile": {"backward_chunk_tokens": 4096, "torch_compile": True},
    "compile": {"torch_compile": True},
    # issue 52's levers on the preset's chunks: Liger's RMSNorm/SwiGLU/RoPE kernels (train.liger_kernels)
    "chunked-2k-liger": {"backward_chunk_tokens": 2100, "liger_kernels": True},
    "chunked-2k-liger-compile": {"backward_chunk_tokens": 2100, "liger_kernels": True, "torch_compile": True},
    # torch.compile of the policy alone, on the preset's chunks (it failed in Inductor on torch 2.11), and of each
    # decoder layer (train.compile_layers: regional compilation; before 2026-11-30 each layer whole, which past Dynamo's
    # recompile limit left at least 24 of the 32 layers eager: every compiled-layers figure until then is of at most 8).
    # Every layer compiled (sixteenth lease): 15.6 s against 16.6 s on-policy, training 6.0 against 7.0 s
    "chunked-2k-compile": {"backward_chunk_tokens": 2100, "torch_compile": True},
    "chunked-2k-compile-layers": {"backward_chunk_tokens": 2100, "compile_layers": True},
    # vLLM 0.31's default sampler, FlashInfer's top-p/top-k (VARIANT_ENVIRONMENT; needs flashinfer-python, which
    # the gpu extra installs): what a cluster install samples with
    "chunked-2k-flashinfer-sampler": {"backward_chunk_tokens": 2100},
    # each LoRA projection and its base as one autograd function (train.fused_lora): the profile's largest item
    # after the projections was the rank-1 branches' matrix-matrix kernels and their float32 input copies
    "chunked-2k-fused-lora": {"backward_chunk_tokens": 2100, "fused_lora": True},
    "chunked-2k-fused-lora-flashinfer-sampler": {"backward_chunk_tokens": 2100, "fused_lora": True},
    # fp8 weights in the colocated rollout engine (train.vllm_quantization), which needs the importance-sampling
    # correction (taken from the loss's forward: no extra pass); the correction alone beside it, to tell them apart
    "chunked-2k-is-correction": {"backward_chunk_tokens": 2100, **LOSS_FORWARD_CORRECTION},
    "chunked-2k-fp8-rollouts": {"backward_chunk_tokens": 2100, "vllm_quantization": "fp8", **LOSS_FORWARD_CORRECTION},
    "chunked-2k-fp8-rollouts-fused-lora": {
        "backward_chunk_tokens": 2100,
        "vllm_quantization": "fp8",
        "fused_lora": True,
        **LOSS_FORWARD_CORRECTION,
    },
    # the presets' fp8 pair on-policy: where the decode and training barely overlap (twentieth lease), the step to beat
    "chunked-2k-fp8-rollouts-triton-lora": {
        "backward_chunk_tokens": 2100,
        **FP8_TRITON_LORA,
        **LOSS_FORWARD_CORRECTION,
    },
    # the colocated engine decodes the next step's completions on its own stream while this step trains
    # (train.overlap_generation in colocate mode): decoding reads memory, training computes, on one GPU
    "chunked-2k-overlap": {"backward_chunk_tokens": 2100, **FUSED_OVERLAP},
    # the same with 4 and 6 completions a backward chunk instead of 2: the LoRA layers' training pass is host-bound
    # (lora_projection.py --host-device, twelfth lease), so fewer, larger chunks issue fewer host calls per token.
    # Measured (benchmarks/README.md, fourteenth lease): 14.7 and 15.0 s against 14.9 s, for 14 and 27 GiB more
    "chunked-4k-overlap": {"backward_chunk_tokens": 4200, **FUSED_OVERLAP},
    "chunked-6k-overlap": {"backward_chunk_tokens": 6300, **FUSED_OVERLAP},
    # cascade attention in the colocated engine (train.vllm_cascade_attention): the step's 32 completions share their
    # prompt, whose keys and values each decoding step then reads once instead of 32 times; on-policy and overlapped.
    # Only vLLM's V1 model runner builds it (the setting selects that runner; engine_args.py): runs before the
    # tenth lease's fix had Model Runner V2 and no cascade. chunked-2k-v1-runner is the control: that runner alone.
    # Measured on 2026-11-30 (benchmarks/README.md): generation 2.4x as long, cascade steps lose the full CUDA graph
    "chunked-2k-cascade": {"backward_chunk_tokens": 2100, "vllm_cascade_attention": True},
    "chunked-2k-v1-runner": {"backward_chunk_tokens": 2100},
    "chunked-2k-overlap-cascade": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "vllm_cascade_attention": True,
    },
    "chunked-2k-overlap-fp8-rollouts-fused-lora": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "vllm_quantization": "fp8",
        "fused_lora": True,
    },
    # beside the decode the GPU is the bound, not the host: the training thread's host waits (engine_stacks.py's CPU
    # column, eighteenth lease), so levers that cut the decode's GPU time come back: an fp8 KV cache
    # (train.vllm_kv_cache_dtype), with fp8 weights and the Triton LoRA branches (less device time a layer)
    "chunked-2k-overlap-fp8-kv": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "vllm_kv_cache_dtype": "fp8",
    },
    "chunked-2k-overlap-fp8-rollouts-triton-lora": OVERLAP_FP8_TRITON_STEP,
    # the presets' step with two steps' completions per request (train.overlap_request_steps: 2): the engine decodes
    # 64 sequences beside two training steps, so each decoding step's weight reads serve twice the completions;
    # completions two and three updates old. With an fp8 KV cache too: at 64 sequences the cache's reads outweigh the
    # fp8 weights' (about 21 against 8 GB a decode step). Measured on one H200 (benchmarks/README.md, twenty-first
    # lease): 13.4 and 12.2 s against the presets' 14.0 s; the 64 sequences decode within the first of the two steps
    # (about 16-19 s beside it), and the second trains alone (about 8 s). With the fp8 cache on another H200
    # (twenty-second lease): 11.2 s against the presets' 15.2 s, 0.65x of that host's vLLM 0.26 step
    "chunked-2k-overlap2-fp8-rollouts-triton-lora": {
        **OVERLAP_FP8_TRITON_STEP,
        "overlap_request_steps": 2,
    },
    # the presets' step from the GPU canary's pass with it (2026-12-02) to the next one's (2026-12-03)
    "chunked-2k-overlap2-fp8-all": TWO_STEP_REQUESTS,
    # the same with training's stream first (train.overlap_training_first): a two-step request has two steps to decode
    # in, so the decode can take what training leaves idle in both instead of sharing the first step's GPU half and
    # half. Measured (twenty-second lease): 12.3 s against 11.2 s, each window's first step longer, and every logged
    # figure but the times (loss, grad norm, rewards, token ratios) the same to the last digit: scheduling only
    "chunked-2k-overlap2-training-first-fp8-rollouts-triton-lora": {
        **OVERLAP_FP8_TRITON_STEP,
        "overlap_request_steps": 2,
        "overlap_training_first": True,
    },
    "chunked-2k-overlap2-training-first-fp8-all": {**TWO_STEP_REQUESTS, "overlap_training_first": True},
    # three and four steps per request: on the hosts where the decode and training do not overlap (twentieth and
    # twenty-first leases: beside the decode training takes about what the two take one after the other), a step
    # costs training alone plus its share of one request's decode, and a request of 96 or 128 sequences reads the
    # weights once a decoding step for three or four steps' completions (three to five, four to seven updates old).
    # Measured on one H200 (benchmarks/README.md, twenty-second lease): 11.3 and 12.0 s (11.2 s the four-step run's
    # second window) against two steps' 11.2 s there: past two steps a request's decode spills no less into its
    # window's first step, so two it is
    "chunked-2k-overlap3-fp8-all": {**TWO_STEP_REQUESTS, "overlap_request_steps": 3},
    "chunked-2k-overlap4-fp8-all": {**TWO_STEP_REQUESTS, "overlap_request_steps": 4},
    # two, three and four steps' completions per request with nothing beside the decode (train.overlap_decode_ahead:
    # false): beside training a two-step request's decode added about 10 s to its window's first step on one H200
    # (twenty-fifth lease), about what 64 sequences cost alone, so a window may cost less as its decode alone plus
    # its steps' training alone; completions 0 to k - 1 updates old, one weight sync per request
    "chunked-2k-batched2-fp8-all": {**PRESETS_STEP, "overlap_request_steps": 2},
    "chunked-2k-batched3-fp8-all": {**PRESETS_STEP, "overlap_request_steps": 3},
    # four: the presets' step since the GPU canary passed with it (2026-12-03)
    "chunked-2k-batched4-fp8-all": PRESETS_STEP,
    # six: a request's 192 sequences and six prompts need about 210k tokens of KV cache, which the engine's 0.3 of an
    # H200 holds (about 490k fp8 tokens) and an H100's does not (about 200k): an H200-only point on the curve
    "chunked-2k-batched6-fp8-all": {**PRESETS_STEP, "overlap_request_steps": 6},
    # the presets' step trains with nothing beside it, as on-policy steps do, where the levers that lost beside the
    # decode paid or may pay: Liger's fused norm, SwiGLU and RoPE kernels on the fused Triton projections, and the
    # decoder layers compiled (train.compile_layers: 0.94x on-policy, sixteenth lease), which cannot trace the fused
    # projections, so with PEFT's
    "chunked-2k-batched4-fp8-all-liger": {**PRESETS_STEP, "liger_kernels": True},
    # fewer, larger chunks: a host-bound pass issues the same calls a chunk for twice or three times the tokens.
    # Beside the decode they did not pay (fourteenth lease: 14.7 and 15.0 s against 14.9 s, 85.5 and 98.6 GiB at
    # the peak: H200s only); with training alone the host is the bound again (twenty-ninth lease)
    "chunked-4k-batched4-fp8-all": {**PRESETS_STEP, "backward_chunk_tokens": 4200},
    "chunked-6k-batched4-fp8-all": {**PRESETS_STEP, "backward_chunk_tokens": 6300},
    "chunked-2k-batched4-fp8-compile-layers": {
        **PRESETS_STEP,
        "fused_lora": False,
        "fused_lora_kernels": "torch",
        "compile_layers": True,
    },
    # the pair's parts and one more device-time lever: fp8 weights alone beside the decode, and the pair with Liger's
    # fused norm, SwiGLU and RoPE kernels (train.liger_kernels: fewer passes over the activations)
    "chunked-2k-overlap-fp8-rollouts": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "vllm_quantization": "fp8",
    },
    "chunked-2k-overlap-fp8-rollouts-triton-lora-liger": {
        **OVERLAP_FP8_TRITON_STEP,
        "liger_kernels": True,
    },
    "chunked-2k-overlap-fp8-all": {
        **OVERLAP_FP8_TRITON_STEP,
        "vllm_kv_cache_dtype": "fp8",
    },
    # the same, training's stream scheduled first (train.overlap_training_first): the decode fills what it leaves
    "chunked-2k-overlap-training-first": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "overlap_training_first": True,
    },
    # the same with a short interpreter switch interval (train.overlap_switch_interval_ms; Python's is 5 ms): each
    # PyTorch call gives up the lock, and the thread that gave it up can wait that long to launch its next kernel.
    # 0.5 ms: 15.9 s against 16.2 s, within the spread (benchmarks/README.md, ninth lease)
    "chunked-2k-overlap-switch-0.5ms": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "overlap_switch_interval_ms": 0.5,
    },
    "chunked-2k-overlap-switch-0.1ms": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "overlap_switch_interval_ms": 0.1,
    },
    # the same with the decoder layers compiled (train.compile_layers): fewer Python-level calls for the training
    # thread, which shares the interpreter lock with the decoding thread. Measured with every layer compiled
    # (sixteenth lease): 14.1 s against the uncompiled twin's 13.5 s, so it stays off in the presets
    "chunked-2k-overlap-compile-layers": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "compile_layers": True,
    },
    # without the shared prompt pass: what sharing it saves (benchmarks/README.md, thirteenth lease: 24.7 s beside the
    # decode against 13.9 s)
    "chunked-2k-unshared": {"backward_chunk_tokens": 2100, "share_prompt_forward": False},
    "chunked-2k-overlap-unshared": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "share_prompt_forward": False,
    },
    # the rank-1 LoRA branches as Triton kernels (train.fused_lora_kernels triton): on-policy and beside the decode
    "chunked-2k-triton-lora": {"backward_chunk_tokens": 2100, "fused_lora": True, "fused_lora_kernels": "triton"},
    "chunked-2k-overlap-triton-lora": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "fused_lora": True,
        "fused_lora_kernels": "triton",
    },
    # both scheduling levers beside the decode: training's stream first, and its LoRA branches as Triton kernels
    "chunked-2k-overlap-training-first-triton-lora": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
        "overlap_training_first": True,
        "fused_lora": True,
        "fused_lora_kernels": "triton",
    },
    # diagnostic: the preset's step (chunked-2k), its third step under torch.profiler
    "chunked-2k-profile": {"backward_chunk_tokens": 2100},
    # diagnostic: the overlapped step under torch.profiler (both threads' kernels): beside chunked-2k-profile's
    # per-call kernel times it says whether training's kernels run slower beside the decode (the GPU shared) or
    # wait between launches (the interpreter lock shared with the decoding thread)
    "chunked-2k-overlap-profile": {
        "backward_chunk_tokens": 2100,
        **FUSED_OVERLAP,
    },
    # diagnostic: the same with train.fused_lora, to see what the fused branches left of the profile's thin products
    "chunked-2k-fused-lora-profile": {"backward_chunk_tokens": 2100, "fused_lora": True},
    # diagnostic: the presets' step under torch.profiler in a step that trains alone (its window's second): the
    # operators by their host time beside their GPU time, for the host-bound training pass (twenty-ninth lease)
    "chunked-2k-batched4-fp8-all-profile": PRESETS_STEP,
    # diagnostic, not a lever (it changes what is sampled): what top-p and the repetition penalty cost the sampler
    "plain-sampler": {"top_p": 1.0, "repetition_penalty": 1.0},
    "unsloth": {"backend": "unsloth"},
    # chunked-2k with PyTorch's expandable segments (VARIANT_ENVIRONMENT)
    "chunked-2k-expandable": {"backward_chunk_tokens": 2100},
    # diagnostic: the baseline with its third step under torch.profiler (kernel table in profile.txt)
    "profile": {},
    # Several GPUs, the preset's chunks: the stage's own launcher (arc_pipeline/training/launch.py) starts the
    # ranks and the server on the GPUs of CUDA_VISIBLE_DEVICES (docs/multi-gpu.md)
    "dp-2": {"backward_chunk_tokens": 2100, "training_processes": 2},
    "dp-4": {"backward_chunk_tokens": 2100, "training_processes": 4},
    "server-1+1": {"backward_chunk_tokens": 2100, "vllm_mode": "server", "vllm_server_gpus": 1},
    "server-tp2+2": {
        "backward_chunk_tokens": 2100,
        "vllm_mode": "server",
        "vllm_server_gpus": 2,
        "vllm_server_tensor_parallel_size": 2,
        "training_processes": 2,
    },
    # the server decodes the next step's completions while the ranks train (arc_pipeline/training/processes/overlap.py);
    # one update old, reweighted by the importance-sampling correction it needs
    "server-1+1-overlap": {
        "backward_chunk_tokens": 2100,
        "vllm_mode": "server",
        "vllm_server_gpus": 1,
        "overlap_generation": True,
        "vllm_importance_sampling_correction": True,
    },
    "server-tp2+2-overlap": {
        "backward_chunk_tokens": 2100,
        "vllm_mode": "server",
        "vllm_server_gpus": 2,
        "vllm_server_tensor_parallel_size": 2,
        "training_processes": 2,
        "overlap_generation": True,
        "vllm_importance_sampling_correction": True,
    },
    "server-dp2+2": {
        "backward_chunk_tokens": 2100,
        "vllm_mode": "server",
        "vllm_server_gpus": 2,
        "training_processes": 2,
    },
    # the correction's ratio from the loss's own forward (arc_pipeline/training/speed/correction.py): no separate
    # old-policy forward; per-token ratios (docs/multi-gpu.md)
    "server-1+1-overlap-fused": {"backward_chunk_tokens": 2100, "vllm_mode": "server", **FUSED_OVERLAP},
    # two steps per server request, sent two steps ahead (overlap_request_steps: 2): a two-replica server decodes
    # 64 sequences (32 each) while the two ranks train two steps; or the same on a TP-2 server
    "server-dp2+2-overlap2-fused": TWO_REPLICAS_OVERLAP_2,
    "server-tp2+2-overlap2-fused": TP2_OVERLAP_2,
    # the same with each rank's micro-batch at one GPU's 8 completions (2 micro-batches of 8 instead of 4 of 4):
    # bnpo normalises per micro-batch and the ranks' gradients are averaged, so the loss is one GPU's
    "server-dp2+2-overlap2-fused-ga2": {**TWO_REPLICAS_OVERLAP_2, "gradient_accumulation_steps": 2},
    "server-tp2+2-overlap2-fused-ga2": {**TP2_OVERLAP_2, "gradient_accumulation_steps": 2},
    # the same with an fp8 KV cache on the server (it changes what is sampled): the server is that layout's bound
    "server-tp2+2-overlap2-fused-ga2-fp8kv": {
        **TP2_OVERLAP_2,
        "gradient_accumulation_steps": 2,
        "vllm_server_kv_cache_dtype": "fp8",
    },
    # three steps per request (96 sequences): each decode step's weight reads serve more tokens; completions up
    # to two updates older than with two steps per request
    "server-tp2+2-overlap3-fused-ga2": {**TP2_OVERLAP_2, "overlap_request_steps": 3, "gradient_accumulation_steps": 2},
}
# environment of a variant's process (set before CUDA starts)
VARIANT_ENVIRONMENT: dict[str, dict[str, str]] = {
    "chunked-2k-v1-runner": {"VLLM_USE_V2_MODEL_RUNNER": "0"},
    "chunked-2k-expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "chunked-2k-flashinfer-sampler": {"VLLM_USE_FLASHINFER_SAMPLER": "1"},
    "chunked-2k-fused-lora-flashinfer-sampler": {"VLLM_USE_FLASHINFER_SAMPLER": "1"},
}
PROFILED_STEP = {
    "profile": 3,
    "chunked-2k-profile": 3,
    "chunked-2k-fused-lora-profile": 3,
    "chunked-2k-overlap-profile": 3,
    "chunked-2k-batched4-fp8-all-profile": 6,
}
PARAMETERS_8B = 8.03e9
PHASES = ("generation", "weight_sync", "rewards", "logprobs", "prepare_other", "train", "optimizer", "step")


def step_profiler(step: int, path: Path) -> Any:
    """A trainer callback that runs optimizer step ``step`` (generation included) under torch.profiler and writes
    the operators and CUDA kernels by their own GPU time, then by their own host time, to ``path``."""
    import torch
    from transformers import TrainerCallback

    class StepProfiler(TrainerCallback):
        profiler: Any = None

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step + 1 == step:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                self.profiler = torch.profiler.profile(activities=activities)
                self.profiler.__enter__()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.profiler is None:
                return
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.profiler.__exit__(None, None, None)
            averages = self.profiler.key_averages()
            # by GPU time where there is one, then by host time: a host-bound pass shows in the second table
            sorts = (["self_cuda_time_total"] if torch.cuda.is_available() else []) + ["self_cpu_time_total"]
            tables = [
                f"sorted by {sort}\n" + averages.table(sort_by=sort, row_limit=60, max_name_column_width=90)
                for sort in sorts
            ]
            path.write_text("\n\n".join(tables))
            self.profiler = None

    return StepProfiler()


def stack_sampler(step: int, path: Path) -> Any:
    """A trainer callback that samples every thread's Python stack in this process (engine_stacks.py: the
    training thread, the colocated engine's, the overlap's generation thread) from optimizer step ``step`` to the
    end of training and writes the counts to ``path``: where a step's host time goes once the engine is warm."""
    from transformers import TrainerCallback

    class StackSampler(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step + 1 == step:
                log.info("stack sampler from step %d: %s", step, engine_stacks.start_sampling(None))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            path.write_text(json.dumps({"from_step": step, **engine_stacks.stop_sampling(None)}))

    return StackSampler()


def run_variant(work: Path, name: str, steps: int, stack_step: int | None = None) -> None:
    """One variant in this process: train, then write its summary beside its metrics."""
    from arc_pipeline.generation.compile_cache import use_compile_cache
    from arc_pipeline.training.config import TrainConfig
    from arc_pipeline.training.grpo import train

    use_compile_cache(work / "compile-cache")
    inputs = json.loads((work / "inputs.json").read_text())
    out = work / name
    config = TrainConfig(**{**BASE_SETTINGS, "max_steps": steps, **VARIANTS[name]})
    callbacks = [step_profiler(PROFILED_STEP[name], out / "profile.txt")] if name in PROFILED_STEP else []
    if stack_step is not None and not config.launched:
        callbacks.append(stack_sampler(stack_step, out / "stacks.json"))
    elif stack_step is not None:
        log.warning("%s trains in processes of its own (the launcher's): its stacks are not sampled", name)
    started = time.perf_counter()
    if config.launched:
        from arc_pipeline.training.launch import StageFiles, run_launched

        files = StageFiles(
            Path(inputs["dataset"]),
            Path(inputs["model"]),
            out / "adapter",
            out / "metrics.parquet",
            out / "checkpoints",
        )
        run_launched(config, files)
    else:
        train(
            config,
            inputs["dataset"],
            inputs["model"],
            out / "adapter",
            out / "metrics.parquet",
            out / "checkpoints",
            callbacks=callbacks,
        )
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    summary = {
        "seconds": time.perf_counter() - started,
        "config": config.model_dump(mode="json"),
        "gpus": visible.split(",") if visible else None,
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))


# What one host's GPU may differ in from another's of the same name (the overlapped step took 11.6 s on one H200 and
# 14.2 s on another, benchmarks/README.md, twentieth lease): read once per variant, and sampled beside the memory.
GPU_FACTS = (
    "name", "driver_version", "compute_mode", "persistence_mode", "power.limit", "clocks.max.sm", "clocks.max.mem"
)  # fmt: skip
GPU_STATE = (
    "memory.used", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "utilization.gpu",
    "clocks_event_reasons.active",
)  # fmt: skip


def query_gpus(fields: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """nvidia-smi's ``fields`` per GPU index, as it prints them; a field this driver does not know (older ones call
    ``clocks_event_reasons`` ``clocks_throttle_reasons``) is left out rather than losing the rest; empty without
    nvidia-smi."""
    names = list(fields)
    while names:
        query = ["nvidia-smi", f"--query-gpu=index,{','.join(names)}", "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(query, capture_output=True, text=True, check=False, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if done.returncode == 0:
            rows = [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]
            return {row[0]: dict(zip(names, row[1:], strict=False)) for row in rows}
        unknown = [name for name in names if name in done.stdout + done.stderr]
        if not unknown:
            return {}
        names = [name for name in names if name not in unknown]
    return {}


def _numbers(states: list[dict[str, str]], field: str) -> list[float]:
    """``field``'s values in nvidia-smi's samples, those it could read ("[N/A]" and missing fields left out)."""
    values = []
    for state in states:
        try:
            values.append(float(state[field]))
        except (KeyError, ValueError):
            continue
    return values


def gpu_state_rows(path: Path, gpus: list[str], measured: list[int]) -> dict[str, str]:
    """Per GPU of the variant, over the samples taken while a measured step ran: the SM clock's median against the
    GPU's highest, the median power draw against its limit, the highest temperature, and the clock-limit reasons
    nvidia-smi named (a bit mask, 0x0000000000000000 when nothing held the clock back) with each one's share of
    the samples; with the driver and compute mode, from ``gpu-host.json`` beside ``path``."""
    import statistics

    if not path.is_file():
        return {}
    host = path.parent / "gpu-host.json"
    facts = json.loads(host.read_text()) if host.is_file() else {}
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # "step" is the last step the metrics hold: the sample is from the step after it
    during = [sample for sample in samples if sample.get("gpus") and sample["step"] + 1 in measured]
    rows: dict[str, str] = {}
    for gpu in gpus:
        fact = facts.get(gpu, {})
        states = [sample["gpus"][gpu] for sample in during if gpu in sample["gpus"]]
        prefix = f"GPU {gpu}" if len(gpus) > 1 else "GPU"
        if fact:
            driver, mode = fact.get("driver_version", "?"), fact.get("compute_mode", "?")
            rows[f"{prefix} driver, compute mode"] = f"{driver}, {mode}"
        if clocks := _numbers(states, "clocks.sm"):
            rows[f"{prefix} SM clock, median of {len(clocks)} samples (MHz)"] = (
                f"{statistics.median(clocks):.0f} of {fact.get('clocks.max.sm', '?')}"
            )
        if power := _numbers(states, "power.draw"):
            limit = fact.get("power.limit", "?")
            rows[f"{prefix} power draw, median (W)"] = f"{statistics.median(power):.0f} of {limit}"
        if temperature := _numbers(states, "temperature.gpu"):
            rows[f"{prefix} temperature, highest (C)"] = f"{max(temperature):.0f}"
        reasons = [state["clocks_event_reasons.active"] for state in states if "clocks_event_reasons.active" in state]
        if reasons:
            rows[f"{prefix} clock-limit reasons (share of samples)"] = ", ".join(
                f"{reason} {reasons.count(reason) / len(reasons):.0%}" for reason in sorted(set(reasons))
            )
    return rows


class GpuMemoryTrace:
    """Every ``interval_s``: the step the variant's metrics reached and each GPU's used memory (nvidia-smi), so
    that each GPU's memory can be read at the end of step 3 and at the end of the run (gpu-memory.jsonl)."""

    def __init__(self, metrics: Path, path: Path, root_pid: int, interval_s: float = 2.0) -> None:
        import threading

        self.metrics, self.path, self.root_pid, self.interval_s = metrics, path, root_pid, interval_s
        self._server_url: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> GpuMemoryTrace:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _step(self) -> int:
        import polars as pl

        try:
            return int(pl.read_parquet(self.metrics)["step"].max() or 0)
        except Exception:  # not written yet, or being replaced
            return 0

    def _loop(self) -> None:
        (self.path.parent / "gpu-host.json").write_text(json.dumps(query_gpus(GPU_FACTS), indent=2))
        with self.path.open("w") as out:
            while not self._stop.wait(self.interval_s):
                # one nvidia-smi call per sample: the memory (MiB) is one of the state's fields
                state = query_gpus(GPU_STATE)
                used = {
                    gpu: float(fields["memory.used"]) / 1024 for gpu, fields in state.items() if "memory.used" in fields
                }
                sample = {"time": time.time(), "step": self._step(), "used_gib": used, "gpus": state}
                server = self._server_counters()
                if server:
                    sample["server"] = server
                out.write(json.dumps(sample) + "\n")
                out.flush()

    def _server_counters(self) -> dict[str, float]:
        """The variant's vLLM server's counters (read as benchmarks/gpu_server.py reads them), found by its
        ``--port`` among the variant's own processes (another invocation's server may run beside it); empty
        without a server."""
        from gpu_bench_inputs import read_counters

        from arc_pipeline.generation.process_tree import descendants

        if self._server_url is None:
            for pid in descendants(self.root_pid):
                try:
                    words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
                except OSError:
                    continue
                if "serve" in words and "--port" in words and any("vllm" in word for word in words):
                    self._server_url = f"http://127.0.0.1:{words[words.index('--port') + 1]}"
                    break
            else:
                return {}
        try:
            return read_counters(self._server_url)
        except Exception:  # starting, or stopped
            return {}


def gpu_memory_rows(path: Path, gpus: list[str], steps: int) -> dict[str, str]:
    """Per GPU of the variant: its highest used GiB while step 3 ran -> while the last (``steps``) ran."""
    if not path.is_file():
        return {}
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # samples after the variant's processes began to end (one of its GPUs empty again) are not part of the run
    while samples and any(samples[-1]["used_gib"].get(gpu, 0.0) < 1.0 for gpu in gpus):
        samples.pop()
    peaks: dict[int, dict[str, float]] = {}
    for sample in samples:  # "step" is the last step the metrics hold: the sample is from the step after it
        if sample["step"] >= steps:
            break  # training is over: the adapter is being written
        step = peaks.setdefault(sample["step"] + 1, {})
        for gpu in gpus:
            step[gpu] = max(step.get(gpu, 0.0), sample["used_gib"].get(gpu, 0.0))
    if 3 not in peaks:
        return {}
    last = max(peaks)
    return {
        f"GPU {gpu} used, step 3 -> step {last} (GiB)": f"{peaks[3][gpu]:.1f} -> {peaks[last][gpu]:.1f}" for gpu in gpus
    }


def steady_steps(wide: Any, config: dict[str, Any]) -> Any:
    """The steps a variant's figures average: not the first (the engine's warm-up, and with overlap_generation
    a synchronous generation), and with overlap_generation whole request windows only.

    A request goes out during the second step and then every ``overlap_request_steps`` (k) steps, each for the k
    steps after those already held, and decodes beside the k steps up to the next one. Near the end the requests
    hold fewer steps or none (no steps left to decode for), so the last windows train with less or nothing
    decoded beside them, at up to the speed of training alone: 6-7 s against 11-12 s beside the decode on one
    H200 (benchmarks/README.md). With k = 2 on one GPU a window's first step decodes the whole request and its
    second trains alone (twenty-first lease), so a cut inside a window also biases the mean.

    Without the decode ahead (``overlap_decode_ahead: false``) a window's first step decodes the whole request
    alone and the others train on what it kept: whole windows after the first (which holds the engine's warm-up)."""
    import polars as pl

    if wide.height <= 1:
        return wide
    first, last = int(wide["step"].min()), int(wide["step"].max())
    kept = wide.filter(pl.col("step") > first)
    if not config.get("overlap_generation"):
        return kept
    k = int(config.get("overlap_request_steps") or 1)
    if config.get("overlap_decode_ahead") is False:
        whole = (last - first + 1) // k  # windows of k steps from the first step on
        if whole > 1:
            kept = wide.filter(pl.col("step").is_between(first + k, first + whole * k - 1))
    else:
        start = first + 1
        # a window starting at step s is whole when its request's k steps (s + k .. s + 2k - 1) are all trained
        windows = (last - 2 * k + 1 - start) // k + 1
        if windows > 0:
            kept = kept.filter(pl.col("step") <= start + windows * k - 1)
    return kept


def summarize(work: Path, name: str, prompt_tokens: float) -> dict[str, Any] | None:
    import polars as pl

    out = work / name
    if not (out / "summary.json").is_file():
        return None
    summary = json.loads((out / "summary.json").read_text())
    config = summary["config"]
    metrics = pl.read_parquet(out / "metrics.parquet").filter(pl.col("value").is_not_null())
    wide = metrics.pivot(on="name", index="step", values="value", aggregate_function="mean").sort("step")
    measured = steady_steps(wide, config)

    def mean(column: str) -> float:
        return float(measured[column].mean()) if column in measured.columns else float("nan")

    completions = config["num_generations"] * config["task_repeats"]
    completion = mean("completions/mean_length")
    tokens = completions * (prompt_tokens + completion)
    # Tokens through the model. With the shared prompt forward (all completions of a step answer one task here)
    # the prompt runs once per micro-batch (chunks or not) and once per step for the reference; the completions
    # run from the prompt's last token on.
    micro_batches = config["gradient_accumulation_steps"]
    rows = config.get("per_device_train_batch_size") or completions // micro_batches
    chunk_budget = config.get("backward_chunk_tokens")
    shared = config.get("share_prompt_forward", False) and config["backend"] == "trl"
    full_row = prompt_tokens + completion
    if shared:
        prompt_pass_tokens = micro_batches * prompt_tokens
        completion_tokens = completions * (completion + 1)
        train_tokens = prompt_pass_tokens + completion_tokens
        chunk_pass = (completion + 1) * (rows if chunk_budget is None else max(1, chunk_budget // (completion + 1)))
    else:
        prompt_pass_tokens, completion_tokens, train_tokens = 0.0, tokens, tokens
        chunk_pass = full_row * (rows if chunk_budget is None else max(1, chunk_budget // full_row))
    reference_tokens = prompt_tokens + completions * (completion + 1) if shared else tokens
    # LoRA: forward 2N, input-gradient backward 2N, recomputation 2N with checkpointing, reference forward 2N.
    # Chunks (backward_chunk_tokens) skip the recomputation of the chunks that fit the budget (all alike here);
    # the shared prompt's pass keeps the model's checkpointing
    checkpointing = config["gradient_checkpointing"]
    chunks_recomputed = checkpointing and (chunk_budget is None or chunk_budget < chunk_pass)
    train_flop = PARAMETERS_8B * (
        prompt_pass_tokens * (4 + 2 * checkpointing) + completion_tokens * (4 + 2 * chunks_recomputed)
    )
    reference_flop = reference_tokens * PARAMETERS_8B * 2 * (config["beta"] > 0)
    row = {"variant": name, "steps measured": measured.height}
    row.update({f"{phase} (s)": mean(f"time/{phase}") for phase in PHASES})
    row["tokens / step"] = tokens
    row["model tokens / step (train)"] = train_tokens
    row["model TFLOP/s (train+logprobs)"] = (
        (train_flop + reference_flop) / (mean("time/train") + mean("time/logprobs")) / 1e12
    )
    row["model TFLOP/s (step)"] = (train_flop + reference_flop) / mean("time/step") / 1e12
    # utilisation of the GPUs that train (the ranks; a server's GPUs only generate)
    training_gpus = config.get("training_processes") or 1
    for span in ("train+logprobs", "step"):
        row[f"MFU, {span} (% of bf16 peak)"] = utilisation_percent(
            row[f"model TFLOP/s ({span})"], summary.get("device_name"), training_gpus
        )
    row["peak allocated (GiB)"] = (
        float(measured["memory/peak_allocated_gib"].max())
        if "memory/peak_allocated_gib" in measured.columns
        else float("nan")
    )
    row["device used (GiB)"] = (
        float(measured["memory/device_used_gib"].max())
        if "memory/device_used_gib" in measured.columns
        else float("nan")
    )
    row["host peak (GiB)"] = mean("memory/host_peak_gib")
    if "memory/reserved_gib" in wide.columns and wide.height >= 3:
        reserved = wide.filter(pl.col("step") >= 3)["memory/reserved_gib"].to_list()
        row["rank 0 reserved, step 3 -> last (GiB)"] = f"{reserved[0]:.1f} -> {reserved[-1]:.1f}"
    row["run incl. start (s)"] = summary["seconds"]
    row.update(gpu_memory_rows(out / "gpu-memory.jsonl", summary.get("gpus") or [], config["max_steps"]))
    row.update(server_rows(out / "gpu-memory.jsonl", config["max_steps"]))
    measured_steps = [int(step) for step in measured["step"].to_list()]
    row.update(gpu_state_rows(out / "gpu-memory.jsonl", summary.get("gpus") or ["0"], measured_steps))
    return row


def server_rows(path: Path, steps: int) -> dict[str, str]:
    """The server's own figures from step 3 to the last step (its counters sampled beside the GPU memory): its mean
    decode step and its completion tokens per second of wall time, to compare with the server alone
    (benchmarks/gpu_server.py)."""
    if not path.is_file():
        return {}
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    served = [sample for sample in samples if sample.get("server") and 3 <= sample["step"] < steps]
    if len(served) < 2:
        return {}
    first, last = served[0], served[-1]

    def delta(name: str) -> float:
        return last["server"].get(name, 0.0) - first["server"].get(name, 0.0)

    rows: dict[str, str] = {}
    for name in ("inter_token_latency", "time_per_output_token"):
        if delta(f"vllm:{name}_seconds_count"):
            decode_ms = 1000 * delta(f"vllm:{name}_seconds_sum") / delta(f"vllm:{name}_seconds_count")
            rows["server decode step, step 3 -> last (ms)"] = f"{decode_ms:.2f}"
            break
    wall = last["time"] - first["time"]
    rows["server completion tokens/s of wall time"] = f"{delta('vllm:generation_tokens_total') / wall:.0f}"
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(name for row in rows for name in row if name != "variant"))
    print("| metric | " + " | ".join(row["variant"] for row in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for name in names:
        values = [row.get(name, "") for row in rows]
        cells = [f"{value:.1f}" if isinstance(value, float) else str(value) for value in values]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for the model, prompts, caches and runs")
    parser.add_argument("--variants", default="baseline", help=f"comma-separated, of {list(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per variant (the first is not counted)")
    parser.add_argument(
        "--variant-timeout", type=float, default=None, help="stop a variant's process after this many seconds"
    )
    parser.add_argument("--grid-side", type=int, default=10, help="side of the random grids (prompt length)")
    parser.add_argument(
        "--peaked-logits",
        type=float,
        metavar="STD",
        help="train and sample a copy of the model with a peaked head: logits of this standard deviation "
        "(gpu_bench_inputs.peaked_model; 8: about 1.5 nats and a 0.95 nucleus of about 13 tokens, as "
        "gpu_inference.py measured on its head of that spread); default: the random head's "
        "nearly flat distribution. A work folder holds runs of one head",
    )
    parser.add_argument(
        "--stack-samples",
        type=int,
        metavar="STEP",
        help="sample the Python stacks of a one-process variant's threads from optimizer step STEP to its end "
        "(engine_stacks.py) and print each thread's most frequent ones; the sampler slows the steps it watches, so "
        "a sampled run's figures are not the table's",
    )
    parser.add_argument("--run-variant", help=argparse.SUPPRESS)  # internal: one variant in a child process
    parser.add_argument("--report-only", action="store_true", help="print the table of the runs already made")
    args = parser.parse_args()
    if args.run_variant:
        # the stage's own log lines (fused projections, overlap counts, warnings) into the variant's log
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        run_variant(args.work, args.run_variant, args.steps, args.stack_samples)
        return
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    inputs = build_inputs(args.work, args.grid_side, rows=max(8, args.steps + 2), logit_std=args.peaked_logits)
    for name in names if not args.report_only else []:
        if (args.work / name / "summary.json").is_file():
            continue  # already measured in this work folder
        command = [
            sys.executable,
            __file__,
            "--work",
            str(args.work),
            "--steps",
            str(args.steps),
            "--run-variant",
            name,
            *(["--stack-samples", str(args.stack_samples)] if args.stack_samples is not None else []),
        ]
        with (args.work / f"{name}.log").open("w") as variant_log:
            environment = {**os.environ, **VARIANT_ENVIRONMENT.get(name, {})}
            child = subprocess.Popen(
                command, stdout=variant_log, stderr=subprocess.STDOUT, start_new_session=True, env=environment
            )
            trace = GpuMemoryTrace(
                args.work / name / "metrics.parquet", args.work / name / "gpu-memory.jsonl", root_pid=child.pid
            )
            (args.work / name).mkdir(parents=True, exist_ok=True)
            try:
                with trace:
                    status: int | str = child.wait(timeout=args.variant_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)  # the variant and its sandbox workers
                child.wait()
                status = f"stopped after {args.variant_timeout:.0f} s"
        print(f"{name}: exit {status} (log {args.work / f'{name}.log'})", flush=True)
    rows = [row for name in names if (row := summarize(args.work, name, inputs["prompt_tokens"])) is not None]
    if rows:
        print(f"prompt tokens (mean): {inputs['prompt_tokens']:.0f}")
        print_table(rows)
    for name in names:
        stacks = args.work / name / "stacks.json"
        if stacks.is_file():
            result = json.loads(stacks.read_text())
            print(f"\nstacks of {name}, from step {result['from_step']}:\n{engine_stacks.stack_table(result)}")


if __name__ == "__main__":
    main()
