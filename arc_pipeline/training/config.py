"""Every knob of GRPO training of the refinement LoRA (the workflow config's ``train`` section).

Defaults are the published multi-turn run (docs/defaults.md). TRL 1.x changed several
defaults the published run relied on (loss type, beta 0, top_p 1.0, bf16 on, no ``max_prompt_length``), so
:func:`arc_pipeline.training.trainer_args.grpo_arguments` sets every one of them from here explicitly and never
relies on TRL's defaults.

Collapse guards (entropy and truncation watch, soft overlong penalty, clip-higher) are off, as published.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, PositiveInt, model_validator

from arc_pipeline.generation.engine import KvCacheDtype
from arc_pipeline.scoring.rewards import REWARD_NAMES
from arc_pipeline.training.collapse_settings import CollapseGuardConfig
from arc_pipeline.training.lora_settings import LoraSettings
from arc_pipeline.training.processes.settings import check_process_settings
from arc_pipeline.training.speed.settings import check_speed_settings


class TrainConfig(LoraSettings):
    """GRPO of a LoRA adapter on the refinement dataset. Field descriptions say where defaults come from."""

    model_config = ConfigDict(extra="forbid")

    # ---- backend
    backend: Literal["trl", "unsloth"] = Field(
        "trl", description="trl: plain TRL + peft; unsloth: Unsloth's patched model and trainer (GPU only, lazy import)"
    )
    init_adapter: Literal["none", "sft"] = Field(
        "none",
        description="the adapter GRPO starts from: none = a fresh LoRA; sft = the sft stage's adapter (SFT then "
        "RL: the workflow makes <results_dir>/sft/adapter an input of the train job). Its LoRA shape must be the "
        "lora_* fields' (set sft's alike); the KL reference stays the base model (the adapter disabled). Backend trl",
    )
    use_vllm: bool = Field(
        False, description="generate with vLLM, colocated in each training process or as a server (vllm_mode; GPU only)"
    )
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="published run: 0.3")
    vllm_enable_sleep_mode: bool = Field(
        False,
        description="put the colocated vLLM engine to sleep (weights and KV cache off the GPU) while the policy "
        "trains, and wake it for generation: the training step gets the engine's memory back (benchmarks/gpu_grpo.py)",
    )
    vllm_quantization: Literal["none", "fp8"] = Field(
        "none",
        description="colocate: the rollout engine's weights in fp8, quantized again at each weight sync, training in "
        "bf16; it changes what is sampled (arc_pipeline/training/processes/quantized_rollouts.py)",
    )
    vllm_kv_cache_dtype: KvCacheDtype = Field(
        "auto",
        description="colocate: the rollout engine's KV cache; fp8 halves the bytes each decode step reads per cached "
        "token, the share of the GPU the decode takes beside training (overlap_generation). It changes what is "
        "sampled: needs vllm_importance_sampling_correction. Beside one step's decode it takes nothing off (13.4 s a "
        "step against 13.5 s on an H200); with overlap_request_steps 2 (64 sequences) the presets' fp8 "
        "(config/barc-multiturn.yaml, benchmarks/README.md)",
    )
    vllm_cascade_attention: bool = Field(
        False,
        description="colocate: vLLM's cascade attention (rollout_engine.py); measured 2.4x slower generation: off",
    )
    torch_compile: bool = Field(False, description="torch.compile the policy (transformers' torch_compile)")
    compile_layers: bool = Field(
        False,
        description="torch.compile the norms, MLP and attention projections of each decoder layer of the policy in "
        "place, LoRA included, shapes dynamic (regional compilation; backend trl, not with torch_compile: "
        "arc_pipeline/training/speed/compiled_layers.py). Measured on an H200: the on-policy step 0.94x, the "
        "overlapped one (overlap_generation) 1.04x: off in the presets. Not with fused_lora (Dynamo cannot trace "
        "its projections)",
    )
    liger_kernels: bool = Field(
        False,
        description="Liger's fused Triton kernels for RMSNorm, SwiGLU and RoPE in the policy's Llama layers "
        "(liger-kernel, in the gpu extra; GPU and backend trl only). The loss and log-probs stay the project's "
        "own: Liger's fused loss is not used",
    )
    fused_lora: bool = Field(
        False,
        description="each LoRA projection and its frozen base as one autograd function: no float32 copy of "
        "the input, rank-1 products as matrix-vector kernels (arc_pipeline/training/speed/fused_lora.py)",
    )
    fused_lora_kernels: Literal["torch", "triton"] = Field(
        "torch",
        description="with fused_lora: the branch's thin products as PyTorch calls, or (rank 1, GPU) as three "
        "Triton kernels summing in float32 (arc_pipeline/training/speed/rank1_kernels.py); on one H200 a layer's "
        "projections 0.86x of PEFT's, the full step within its spread (benchmarks/README.md)",
    )

    # ---- processes and GPUs of the train job (docs/multi-gpu.md)
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="with use_vllm: colocate = each training process runs its own vLLM engine on its GPU; "
        "server = the job starts a vLLM server (trl vllm-serve) on vllm_server_gpus GPUs of its own and the "
        "training processes send it their prompts and weights",
    )
    vllm_server_gpus: PositiveInt = Field(
        1,
        description="server mode: GPUs of the vLLM server (data-parallel replicas x vllm_server_tensor_parallel_size)",
    )
    vllm_server_tensor_parallel_size: PositiveInt = Field(
        1, description="server mode: GPUs per server replica (must divide vllm_server_gpus)"
    )
    vllm_server_gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="server mode: share of each server GPU's memory vLLM takes (it owns them)"
    )
    vllm_server_kv_cache_dtype: KvCacheDtype = Field(
        "auto",
        description="server mode: the server's KV cache; fp8 halves the bytes each decode step reads per cached "
        "token (the server is the bound of the 4-GPU layout: docs/multi-gpu.md). It changes what is sampled",
    )
    vllm_server_timeout_s: float = Field(
        600, gt=0, description="server mode: seconds the stage waits for the server's /health to answer, then gives up"
    )
    overlap_generation: bool = Field(
        False,
        description="the engine decodes the next step's completions while the policy trains on this step's (server: "
        "on its GPUs; colocate: on the same GPU, its own stream): one update old, so it needs "
        "vllm_importance_sampling_correction (arc_pipeline/training/processes/overlap.py). Off: on-policy, published",
    )
    overlap_request_steps: PositiveInt = Field(
        1,
        description="with overlap_generation: steps of completions one server request holds. 1 = the next step's, "
        "decoded while this step trains (one update old); 2 = the two steps after the next, sent one request "
        "every two steps (two and three updates old), for layouts whose server needs more than a step to decode "
        "one step's completions (docs/multi-gpu.md); colocated, all of a request's sequences at once, beside the "
        "first step of the two (overlap_decode_ahead false: alone; the one-GPU presets' 4: config/barc-multiturn.yaml)",
    )
    overlap_decode_ahead: bool = Field(
        True,
        description="with overlap_generation: true = each request is sent ahead and decodes beside training (as "
        "overlap_request_steps says); false = no decode beside training: when a step finds no completions kept, "
        "the engine decodes that step's and the next overlap_request_steps - 1 steps' in one request and the step "
        "waits for it (0 to overlap_request_steps - 1 updates old; one weight sync per request). Needs "
        "overlap_request_steps > 1; the one-GPU presets' false (arc_pipeline/training/processes/overlap.py)",
    )
    overlap_training_first: bool = Field(
        False,
        description="colocate overlap_generation: training's CUDA stream gets the GPU's higher scheduling priority, so "
        "the decode takes what training leaves idle. Scheduling only: what is learned does not change. No gain "
        "measured on one H200 (docs/multi-gpu.md)",
    )
    overlap_switch_interval_ms: float | None = Field(
        None, gt=0, description="overlap_generation: the interpreter's switch interval during training (None: 5 ms)"
    )
    training_processes: PositiveInt = Field(
        1,
        description="data-parallel training processes, one GPU each (torch.distributed; gloo on the CPU); they "
        "share each step's completions, so steps and completions per step do not change with this number",
    )
    stop_grace_s: float = Field(
        30,
        ge=0,
        description="when one process of a multi-process train job fails or the job is stopped, seconds the "
        "others get between SIGTERM and SIGKILL",
    )
    use_cpu: bool = Field(False, description="train on the CPU (tests, the embedded default config)")
    bf16: bool = Field(True, description="bf16 mixed precision (published run: bf16); False on CPU")
    gradient_checkpointing: bool = Field(True, description="recompute activations to fit 8B + 9.7k tokens on a GPU")
    backward_chunk_tokens: PositiveInt | None = Field(
        None,
        description="run each micro-batch's forward and backward in chunks of completions of at most this many "
        "tokens, without activation checkpointing: no recomputation. With share_prompt_forward a chunk counts its "
        "completions alone (the micro-batch's shared prompt runs once, checkpointed, for all its chunks); otherwise "
        "prompt + completion. A completion longer than this runs alone, checkpointed if gradient_checkpointing is "
        "on. The loss and its normalisation stay the micro-batch's (arc_pipeline/training/speed/chunked_backward.py). "
        "Size it from the GPU memory left beside the model and vLLM: about 6.6 MiB of activations per token at the "
        "8B shape (the presets' 2100: benchmarks/README.md). None = the whole micro-batch in one pass",
    )
    share_prompt_forward: bool = Field(
        True,
        description="completions of one prompt share its forward pass: the prompt runs once per group and its "
        "keys and values are attended to by every completion (FlashAttention on a GPU), for the policy's forward "
        "and backward and the reference log-probs (arc_pipeline/training/speed/shared_prompt.py). The same "
        "log-probs and gradients up to rounding; in the presets a step's 32 completions answer one task, so 51k of a "
        "full-length step's 84k tokens are prompt. Backend trl (unsloth computes its own log-probs). Without vLLM "
        "(use_vllm off: CPU runs), transformers' generate also prefills each prompt once for its completions "
        "(arc_pipeline/training/speed/shared_prompt_generation.py): the same samples",
    )
    seed: int = Field(42, description="seed of adapter initialisation, data order and sampling")

    # ---- optimisation
    learning_rate: float = Field(4e-6, gt=0, description="published run: 4e-6")
    lr_scheduler_type: str = Field("constant_with_warmup", description="published run: constant with warm-up")
    warmup_ratio: float = Field(0.01, ge=0, le=1, description="published run: 1% warm-up")
    max_grad_norm: float = Field(0.05, gt=0, description="published run: 0.05")
    weight_decay: float = Field(
        0.01,
        ge=0,
        description="AdamW weight decay (published run: 0.01, unsloth's trainer default; transformers' default is 0)",
    )
    optim: str = Field(
        "adamw_torch_fused",
        description="transformers optimizer name; the published run used 'adamw_8bit' (unsloth's default, needs "
        "bitsandbytes and a GPU); see docs/reproduction.md",
    )
    num_train_epochs: float = Field(1, gt=0, description="published run: 1 epoch over the refinement dataset")
    max_steps: int = Field(-1, description="stop after this many optimizer steps; -1 = run the epochs")
    gradient_accumulation_steps: PositiveInt = Field(4, description="published run: 4")
    per_device_train_batch_size: PositiveInt | None = Field(
        None,
        description="completions per forward pass; None = num_generations x task_repeats / "
        "(gradient_accumulation_steps x training_processes), so one prompt's generations are spread over the "
        "accumulation steps and processes (TRL: generation batch = per-device batch x processes x "
        "steps_per_generation, steps_per_generation = gradient_accumulation_steps)",
    )

    # ---- GRPO
    num_generations: PositiveInt = Field(
        32, ge=2, description="completions per advantage group (one group = one prompt's completions)"
    )
    task_repeats: PositiveInt = Field(
        1,
        description="groups per task and step: each task is sampled num_generations x task_repeats times per "
        "optimizer step, as task_repeats groups whose advantages are centred per group. The published run: "
        "num_generations 8, task_repeats 4 (4 groups of 8 = 32 completions, std over all 32 with scale_rewards "
        "batch); 1 group of 32 is num_generations 32, task_repeats 1",
    )
    beta: float = Field(
        0.02, ge=0, description="KL coefficient (published run: 0.02; TRL 1.x default 0 = no reference)"
    )
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"] = Field(
        "bnpo",
        description="loss aggregation; the published run used 'bnpo' (normalised by the tokens of the local "
        "batch) because unsloth overrode it: TRL 0.23's own default was 'dapo', as is TRL 1.x's",
    )
    vllm_importance_sampling_correction: bool = Field(
        False,
        description="TRL's correction for the vLLM sampler being off-policy (TRL 1.x default on: sequence-level "
        "mask, clip 3.0, computed on logprobs that include the repetition penalty, so whole completions drop out "
        "of the loss). Off in the published run (unsloth forced it off)",
    )
    vllm_importance_sampling_mode: Literal["sequence_mask", "sequence_truncate", "token_mask", "token_truncate"] = (
        Field(
            "sequence_mask",
            description="with vllm_importance_sampling_correction: one ratio per completion or per token, masked or "
            "truncated outside the bounds (TRL 1.x default: sequence_mask). With overlap_generation token_truncate "
            "is the robust choice: a completion's product of 1,024 token ratios is far from 1 long before any "
            "token's is (docs/multi-gpu.md)",
        )
    )
    importance_sampling_from_loss_forward: bool = Field(
        False,
        description="with vllm_importance_sampling_correction: take the current policy's log-probs for the "
        "correction from the loss's own forward, not from TRL's separate forward without gradient; the same "
        "values while each generation batch is trained once (num_iterations 1), one forward fewer per step "
        "(arc_pipeline/training/speed/correction.py)",
    )
    vllm_importance_sampling_clip_max: float = Field(
        3.0, gt=1, description="upper bound of the importance ratio: truncated to it or masked above it (TRL 1.x: 3.0)"
    )
    use_bias_correction_kl: bool = Field(
        False, description="KL term times the importance ratio (TRL 1.x default: on; the published run: off, plain k3)"
    )
    scale_rewards: Literal["group", "batch", "none"] = Field("batch", description="published run: batch")
    mask_truncated_completions: bool = Field(
        True, description="drop truncated completions from the loss (published run: on)"
    )
    epsilon: float = Field(0.2, gt=0, description="lower clip of the importance ratio (TRL default)")
    epsilon_high: float | None = Field(
        None, gt=0, description="clip-higher (DAPO recommends 0.28); None = same as epsilon (published run: off)"
    )
    num_iterations: PositiveInt = Field(1, description="optimisation passes per generation batch (published run: 1)")
    double_bos: bool = Field(
        False,
        description="keep the rendered prompt's <|begin_of_text|> so that TRL's tokenization adds a second one, "
        "as in the published run (its rollouts began with two); off = one BOS, as the model was trained",
    )
    online_multi_turn: bool = Field(
        False,
        description="sample both turns with the current policy (TRL rollout_func, arc_pipeline.training.online): "
        "first answer, sandbox feedback, second answer; the loss covers both answers but not the feedback "
        "(env_mask) and the reward scores the last answer. Off = the published run: second turn only, on fixed first "
        "turns",
    )

    # ---- sampling
    temperature: float = Field(1.0, gt=0, description="published run: 1.0")
    top_p: float = Field(0.95, gt=0, le=1, description="published run: 0.95 (TRL 1.x default 1.0)")
    top_k: int = Field(0, ge=0, description="0 = no top-k filtering (published run: none)")
    repetition_penalty: float = Field(1.02, gt=0, description="published run: 1.02")
    max_completion_length: PositiveInt = Field(1024, description="published run: 1,024 tokens")
    max_seq_length: PositiveInt = Field(
        9700,
        description="prompt + completion limit (published run: 9,700); longer prompts are dropped from the dataset",
    )

    # ---- reward
    reward: str = Field("arc-v2-no-pixel-score", description=f"one of {list(REWARD_NAMES)} (published run: arc-v2)")
    truncated_reward: float | None = Field(
        None, description="reward of a truncated completion regardless of its program; None = score it normally"
    )
    soft_overlong_cache: int = Field(
        0,
        ge=0,
        description="DAPO soft overlong punishment (trl.rewards.get_soft_overlong_punishment): completions longer "
        "than max_completion_length - this many tokens get a linearly growing penalty; 0 = off (published run: off)",
    )
    soft_overlong_weight: float = Field(1.0, ge=0, description="weight of the overlong penalty in the summed reward")
    execution_workers: PositiveInt | None = Field(
        None,
        description="sandbox processes running generated programs, per training process; None = the job's "
        "threads (--threads: the workflow passes cluster.gpu.threads; 4 when run without it) divided among the "
        "training processes",
    )
    execution_rules: Literal["strict", "published"] = Field(
        "strict",
        description="execution rules of the reward (arc_pipeline/scoring/rules.py); the published "
        "rewards were computed under 'published'",
    )
    execution_timeout_s: float = Field(
        1.0, gt=0, description="time limit of a program on all inputs (published run: 1 s)"
    )
    execution_memory_mb: PositiveInt = Field(
        4096, description="memory limit of a program during RL (published run: 4,096 MiB)"
    )

    # ---- checkpoints and logging
    save_steps: PositiveInt = Field(200, description="checkpoint every this many steps (published run: 200)")
    save_total_limit: PositiveInt | None = Field(None, description="keep at most this many checkpoints; None = all")
    logging_steps: PositiveInt = Field(
        1,
        description="log every this many steps (one row of training_metrics; metrics are averaged over the "
        "window); the published run logged every 10",
    )
    report_to: list[str] = Field(
        default_factory=lambda: ["tensorboard"], description="trackers: tensorboard (default), wandb, none"
    )
    run_name: str | None = Field(None, description="tracker run name; None = the output folder name")
    log_completions: bool = Field(False, description="TRL's sample table of prompts and completions")

    collapse_guard: CollapseGuardConfig = Field(
        default_factory=CollapseGuardConfig, description="stop training when it collapses (off by default)"
    )

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.reward not in REWARD_NAMES:
            raise ValueError(f"reward must be one of {list(REWARD_NAMES)}, got {self.reward!r}")
        shares = self.gradient_accumulation_steps * self.training_processes
        if self.per_device_train_batch_size is None and self.completions_per_step % shares:
            raise ValueError(
                f"num_generations x task_repeats ({self.completions_per_step}) must be a multiple of "
                f"gradient_accumulation_steps x training_processes ({shares}), or set per_device_train_batch_size"
            )
        if (
            self.task_repeats > 1
            and self.per_device_train_batch_size is not None
            and (self.per_device_train_batch_size * shares != self.completions_per_step)
        ):
            raise ValueError(
                "with task_repeats > 1 one generation batch must hold exactly one task's groups: "
                "per_device_train_batch_size x gradient_accumulation_steps x training_processes must equal "
                "num_generations x task_repeats"
            )
        check_process_settings(self)
        if self.max_completion_length >= self.max_seq_length:
            raise ValueError("max_completion_length must be smaller than max_seq_length")
        if self.use_cpu and self.bf16:
            raise ValueError("bf16 is for GPUs: set bf16 false with use_cpu true")
        if self.init_adapter != "none" and self.backend != "trl":
            raise ValueError("init_adapter needs backend trl (unsloth attaches its own fresh LoRA)")
        check_speed_settings(self)
        if self.soft_overlong_cache >= self.max_completion_length:
            raise ValueError("soft_overlong_cache must be smaller than max_completion_length")
        return self

    @property
    def launched(self) -> bool:
        """Whether the stage starts its processes through arc_pipeline/training/launch.py (server or several)."""
        return self.vllm_mode == "server" or self.training_processes > 1

    @property
    def job_gpus(self) -> int:
        """GPUs one train job uses on a GPU machine: the server's plus one per training process."""
        return self.training_processes + (self.vllm_server_gpus if self.vllm_mode == "server" else 0)

    @property
    def completions_per_step(self) -> int:
        """Completions of one task per generation batch: task_repeats groups of num_generations."""
        return self.num_generations * self.task_repeats

    @property
    def batch_size(self) -> int:
        """Per-device train batch size actually used."""
        if self.per_device_train_batch_size is not None:
            return self.per_device_train_batch_size
        return self.completions_per_step // (self.gradient_accumulation_steps * self.training_processes)

    def reward_workers(self, threads: int | None = None) -> int:
        """``execution_workers`` if set, else the job's threads (else 4) shared by the training processes."""
        return self.execution_workers or max(1, (threads or 4) // self.training_processes)

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt trained on; the one owner of this limit (the workflow passes it to refine-dataset)."""
        return self.max_seq_length - self.max_completion_length
