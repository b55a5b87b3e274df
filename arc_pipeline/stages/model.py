"""``arc-pipeline model``: produce the base model folder every later stage loads.

Three sources, one kind of output (a Hugging Face model folder plus ``model.json``):

- ``tiny``: a tiny Llama (``LlamaForCausalLM``) and a byte-level BPE tokenizer with the Llama 3.1
  special tokens and chat template, built in well under a minute from the prompts of the given tasks.
  Its random weights get a short "answer-format warm-up" (:func:`warm_up`): it then answers every
  prompt with a trivial fenced program and ends its turn, so the whole workflow runs offline on a CPU
  with the same code paths as the real model and every stage gets data (parsed programs, valid and
  invalid outputs, reward variance).
- ``hub``: ``huggingface_hub.snapshot_download`` of e.g. ``barc0/Llama-3.1-ARC-Potpourri-Induction-8B``.
- ``path``: an existing local folder, linked file by file (no copy of the weights).
- ``random``: random weights of a real architecture (by default Llama-3.1-8B, the BARC model's shape)
  and an offline tokenizer with the full 128,256-token Llama 3 vocabulary, the special tokens at their
  real ids and the Llama 3.1 chat template: GPU smoke runs measure memory and speed at full size with
  no network (``config/h200-smoke.yaml``). An optional short warm-up (as for ``tiny``) makes it answer
  with trivial programs, so that refinement and GRPO get data.

For ``hub`` and ``path`` the saved tokenizer config pads with ``<|finetune_right_pad_id|>`` instead of
``<|eot_id|>``, as the published run did by hand (docs/prompts.md). The folder is built beside
``--output`` and renamed into
place, so a failed run never leaves a half-written model behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from arc_pipeline.config_args import add_config_argument, parse_config
from arc_pipeline.models import (
    END_OF_TEXT_TOKEN,
    END_OF_TURN_TOKEN,
    MARKER_FILE,
    PAD_TOKEN,
    ModelFolderError,
    check_model_dir,
)

log = logging.getLogger(__name__)

BEGIN_OF_TEXT_TOKEN = "<|begin_of_text|>"
# The Llama 3.1 special tokens (the real vocabulary also has reserved ones the pipeline never uses).
SPECIAL_TOKENS = (
    BEGIN_OF_TEXT_TOKEN,
    END_OF_TEXT_TOKEN,
    "<|start_header_id|>",
    "<|end_header_id|>",
    END_OF_TURN_TOKEN,
    PAD_TOKEN,
    "<|eom_id|>",
    "<|python_tag|>",
)
VLLM_CPU_HEAD_SIZE = 64  # vLLM's CPU attention kernels reject small heads (16 fails, 64 works)

# Renders like Llama 3.1 Instruct's own template without tool calling: the default system header with
# its knowledge-cutoff lines, every content trimmed, <|eot_id|> after each turn. Because contents are
# trimmed, a continued final message loses its trailing whitespace, as it does with the real model.
LLAMA31_CHAT_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] | trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = '' %}\n"
    "{%- endif %}\n"
    "{%- if date_string is not defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}\n"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}\n"
    "{{- system_message + '<|eot_id|>' }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\n"
    "    {{- message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

# A BARC-style answer, so that completions (prose, a fenced Python block) tokenize sensibly.
EXAMPLE_ANSWER = '''```python
from common import *

import numpy as np
from typing import *

# concepts:
# symmetry, color mapping, object detection

# description:
# In the input you will see a black grid with a few colored objects.
# To make the output, mirror every object to the right side of the grid
# and recolor it with the color of the largest object.

def transform(input_grid):
    # plan:
    # 1. find the connected components (objects) on a black background
    # 2. pick the color of the largest object
    # 3. mirror each object and draw it with that color
    output_grid = np.copy(input_grid)
    background = Color.BLACK
    objects = find_connected_components(input_grid, background=background, connectivity=4, monochromatic=False)
    if len(objects) == 0:
        return output_grid
    largest = max(objects, key=lambda obj: np.sum(obj != background))
    target_color = np.argmax(np.bincount(largest[largest != background].flatten()))
    for obj in objects:
        x, y, width, height = bounding_box(obj, background=background)
        sprite = crop(obj, background=background)
        mirrored = np.fliplr(sprite)
        mirrored[mirrored != background] = target_color
        blit_sprite(output_grid, mirrored, x=input_grid.shape[0] - x - width, y=y, background=background)
    for i in range(output_grid.shape[0]):
        for j in range(output_grid.shape[1]):
            if output_grid[i, j] == Color.RED and input_grid[i, j] != Color.RED:
                output_grid[i, j] = Color.BLUE
    return output_grid
```
'''


# Bodies of the warm-up answers (see warm_up): trivial programs, so that samples differ. Most give a
# valid grid for any input and now and then solve a task by luck; the last two fail on purpose (a 1-D
# row, colours out of range), so valid and invalid outputs both occur and GRPO sees reward variance.
WARMUP_BODIES = (
    "return input_grid",
    "return np.flipud(input_grid)",
    "return np.fliplr(input_grid)",
    "return np.rot90(input_grid)",
    "return np.transpose(input_grid)",
    "return np.where(input_grid, 1, 0)",
    "return input_grid[:2, :2]",
    "return input_grid[0]",
    "return input_grid + 10",
)


WARMUP_CORPUS_REPEATS = 20


def warmup_answer(body: str) -> str:
    """A short BARC-style answer: a fenced program defining ``transform`` with ``body``."""
    return f"```python\nfrom common import *\n\ndef transform(input_grid):\n    {body}\n```"


# Modules whose Python source (code and docstrings) gives the tokenizer a general code vocabulary.
CODE_MODULES = (
    "numpy.lib._function_base_impl",
    "numpy.lib._shape_base_impl",
    "numpy._core.numeric",
    "collections",
    "statistics",
)


class TinyModelConfig(BaseModel):
    """A tiny Llama for CPU runs, shaped like Llama 3.1 (GQA, untied head, RoPE 500k).

    Its weights are random, then (unless ``warmup_steps`` is 0) briefly fine-tuned to answer every
    prompt with a short BARC-style program (see :func:`warm_up`), so that a default run has parseable
    programs, valid and invalid outputs and reward variance in every stage.
    """

    hidden_size: int = Field(128, ge=64, description="model width; hidden_size / num_attention_heads must be 64")
    num_hidden_layers: int = Field(2, ge=1, description="transformer blocks")
    num_attention_heads: int = Field(2, ge=1, description="query heads (head size 64: vLLM's CPU kernels need it)")
    num_key_value_heads: int = Field(1, ge=1, description="key/value heads (grouped-query attention, as Llama 3.1)")
    intermediate_size: int = Field(512, ge=1, description="MLP width")
    vocab_size: int = Field(
        4096, ge=512, description="target size of the BPE vocabulary; the model's embedding gets the size reached"
    )
    seed: int = Field(0, description="seed of the weight initialisation")
    max_position_embeddings: int = Field(
        16384, ge=12288, description="context length; prompts reach ~8.6k tokens with the real tokenizer"
    )
    corpus_tasks: int = Field(200, ge=1, description="at most this many tasks feed the tokenizer's training text")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="dtype of the saved weights")
    warmup_steps: int = Field(
        200,
        ge=0,
        description="answer-format warm-up: optimizer steps teaching the model to answer with a short fenced "
        "program ending its turn (a random variant of WARMUP_BODIES); 0 = keep the random weights",
    )
    warmup_learning_rate: float = Field(
        5e-3, gt=0, description="peak AdamW learning rate of the warm-up (10% linear ramp, then linear decay)"
    )
    warmup_batch_size: int = Field(16, ge=1, description="sequences per warm-up step")

    @model_validator(mode="after")
    def _head_size(self) -> "TinyModelConfig":
        if self.hidden_size != VLLM_CPU_HEAD_SIZE * self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) / num_attention_heads ({self.num_attention_heads}) must be "
                f"{VLLM_CPU_HEAD_SIZE}: vLLM's CPU attention rejects other head sizes"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        return self


# Llama 3 special tokens at their real ids (128,000 + i): a tokenizer built here matches the BARC
# model's ids, so vLLM's stop ids, the pad id and the embedding size are those of the real model.
LLAMA3_FIRST_SPECIAL_ID = 128000
LLAMA3_VOCAB_SIZE = 128256
LLAMA3_SPECIAL_TOKENS = (
    BEGIN_OF_TEXT_TOKEN,
    END_OF_TEXT_TOKEN,
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    PAD_TOKEN,
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    END_OF_TURN_TOKEN,
    "<|python_tag|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(3, 248)),
)


class LlamaShape(BaseModel):
    """A Llama architecture; the defaults are Llama-3.1-8B's ``config.json`` (the BARC model's shape)."""

    hidden_size: int = Field(4096, ge=64)
    intermediate_size: int = Field(14336, ge=1)
    num_hidden_layers: int = Field(32, ge=1)
    num_attention_heads: int = Field(32, ge=1)
    num_key_value_heads: int = Field(8, ge=1)
    max_position_embeddings: int = Field(131072, ge=12288)
    rope_theta: float = Field(500000.0, gt=0)
    rope_scaling: dict[str, Any] | None = Field(
        default_factory=lambda: {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        description="Llama 3.1's long-context RoPE scaling",
    )

    @model_validator(mode="after")
    def _heads(self) -> "LlamaShape":
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                "hidden_size must be a multiple of num_attention_heads, and num_attention_heads of num_key_value_heads"
            )
        return self


class RandomModelConfig(BaseModel):
    """Random weights of a real architecture with a full-size Llama 3 tokenizer (GPU smoke runs).

    Nothing is downloaded. The tokenizer is a byte-level BPE learnt from the tasks' prompts
    (``bpe_vocab_size`` tokens), padded with never-produced filler tokens to id 127,999, then the 256
    Llama 3 special tokens at 128,000-128,255: embedding and head have the real 128,256 rows.
    """

    shape: LlamaShape = Field(default_factory=LlamaShape, description="architecture (default Llama-3.1-8B)")
    bpe_vocab_size: int = Field(8192, ge=512, le=LLAMA3_FIRST_SPECIAL_ID, description="learnt BPE tokens")
    corpus_tasks: int = Field(200, ge=1, description="at most this many tasks feed the tokenizer's training text")
    seed: int = Field(0, description="seed of the weight initialisation and the warm-up")
    dtype: Literal["float32", "bfloat16"] = Field("bfloat16", description="dtype of the weights (and the warm-up)")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where to initialise (and warm up) the weights; auto = cuda when available"
    )
    warmup_steps: int = Field(
        0, ge=0, description="answer-format warm-up steps as for the tiny model (see warm_up); 0 = random weights"
    )
    warmup_learning_rate: float = Field(
        3e-4, gt=0, description="peak AdamW learning rate of the warm-up (deep models need far less than tiny's)"
    )
    warmup_batch_size: int = Field(16, ge=1, description="sequences per warm-up step")


class ModelStageConfig(BaseModel):
    """Where the base model comes from (the workflow config's ``model`` section)."""

    source: Literal["tiny", "hub", "path", "random"] = Field(
        "tiny",
        description="tiny: build a random test model; hub: download; path: use a local folder; "
        "random: random weights of a real architecture (random.shape) with a full Llama 3 tokenizer",
    )
    name_or_path: str = Field(
        "barc0/Llama-3.1-ARC-Potpourri-Induction-8B",
        description="hub repository id (source hub) or local model folder (source path); unused for tiny",
    )
    revision: str | None = Field(None, description="hub branch, tag or commit (source hub); None = main")
    ignore_patterns: list[str] = Field(
        default_factory=lambda: ["original/*", "*.pth"],
        description="hub files not to download (Meta's original consolidated checkpoints)",
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="the tiny model (source tiny)")
    random: RandomModelConfig = Field(
        default_factory=RandomModelConfig, description="the random full-size model (source random)"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", help="tasks parquet (TASKS_SCHEMA) whose prompts train the tiny tokenizer")
    parser.add_argument("--output", required=True, help="model folder to write (replaced atomically)")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    config = parse_config(args, ModelStageConfig)
    output = Path(args.output)
    if config.source in ("tiny", "random") and not args.tasks:
        raise SystemExit(f"model: source {config.source!r} needs --tasks (a tasks parquet to train its tokenizer on)")
    started = time.perf_counter()
    with _staging_dir(output) as staging:
        if config.source == "tiny":
            info = build_tiny_model(Path(args.tasks), staging, config.tiny)
        elif config.source == "random":
            info = build_random_model(Path(args.tasks), staging, config.random)
        elif config.source == "hub":
            info = download_hub_model(config, staging)
        else:
            info = link_local_model(Path(config.name_or_path), staging)
        info["build_seconds"] = round(time.perf_counter() - started, 2)
        (staging / MARKER_FILE).write_text(json.dumps(info, indent=2) + "\n")
        check_model_dir(staging)
    log.info("model folder %s ready (%s) in %.1f s", output, info["name"], info["build_seconds"])
    return 0


class _staging_dir:
    """Build in a hidden sibling of ``output``; on success replace ``output`` with it, else delete it."""

    def __init__(self, output: Path) -> None:
        self.output = output

    def __enter__(self) -> Path:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=f".{self.output.name}.", suffix=".tmp", dir=self.output.parent))
        umask = os.umask(0)
        os.umask(umask)
        self.path.chmod(0o777 & ~umask)  # mkdtemp makes it private; the model folder is shared
        return self.path

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        from arc_pipeline.io import share_like_umask

        share_like_umask(self.path)  # safetensors writes weights 0600
        old = None
        if self.output.exists() or self.output.is_symlink():
            old = self.output.with_name(f".{self.output.name}.old-{os.getpid()}")
            os.rename(self.output, old)
        os.rename(self.path, self.output)
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()


# ---------------------------------------------------------------- tiny


def tokenizer_corpus(tasks: list[Any], max_tasks: int) -> list[str]:
    """Texts the tiny tokenizer learns its merges from: first-turn and refinement messages, an answer."""
    from arc_pipeline.domain.prompts import first_turn_messages, refinement_messages

    texts: list[str] = [EXAMPLE_ANSWER, *_module_sources(CODE_MODULES)]
    # The warm-up answers, often enough that their words become single tokens (short completions).
    texts.extend(warmup_answer(body) for body in WARMUP_BODIES for _ in range(WARMUP_CORPUS_REPEATS))
    for task in tasks[:max_tasks]:
        order = range(len(task.train))
        texts.extend(message["content"] for message in first_turn_messages(task, order, 0))
        # Feedback as if the program had returned each train input unchanged (shapes may differ).
        refinement = refinement_messages(task, 0, EXAMPLE_ANSWER, task.train_inputs)
        texts.append(refinement[-1]["content"])
    return texts


def _module_sources(names: tuple[str, ...]) -> list[str]:
    """Source texts of the importable modules among ``names`` (a renamed numpy module is skipped)."""
    import importlib
    import inspect

    texts = []
    for name in names:
        try:
            texts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError):
            log.debug("no source for %s; left out of the tokenizer corpus", name)
    return texts


def _llama31_fast_tokenizer(tokenizer: Any, max_length: int) -> Any:
    """A transformers tokenizer around ``tokenizer`` with the Llama 3.1 special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BEGIN_OF_TEXT_TOKEN,
        eos_token=END_OF_TURN_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=LLAMA31_CHAT_TEMPLATE,
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )


def _corpus_tasks(tasks_path: Path, max_tasks: int) -> list[Any]:
    """The first ``max_tasks`` tasks of ``tasks_path``: what the local tokenizers are trained on."""
    from arc_pipeline.io import InputFileError, read_frame
    from arc_pipeline.schemas import TASKS_SCHEMA
    from arc_pipeline.task_files import tasks_from_frame

    frame = read_frame(tasks_path, TASKS_SCHEMA)
    if frame.height == 0:
        raise InputFileError(f"{tasks_path}: no tasks to train the tokenizer on")
    return tasks_from_frame(frame.head(max_tasks), str(tasks_path))


def train_tokenizer(texts: list[str], vocab_size: int, max_length: int) -> Any:
    """A byte-level BPE (any text encodes) with the Llama 3.1 special tokens, as a fast HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    bos_id = tokenizer.token_to_id(BEGIN_OF_TEXT_TOKEN)
    # Like Llama 3's tokenizer, plain encoding prepends <|begin_of_text|> (chat templates already have it).
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BEGIN_OF_TEXT_TOKEN}:0 $A:0",
                pair=f"{BEGIN_OF_TEXT_TOKEN}:0 $A:0 {BEGIN_OF_TEXT_TOKEN}:1 $B:1",
                special_tokens=[(BEGIN_OF_TEXT_TOKEN, bos_id)],
            ),
        ]
    )
    return _llama31_fast_tokenizer(tokenizer, max_length)


def build_tiny_model(tasks_path: Path, output: Path, config: TinyModelConfig) -> dict[str, Any]:
    """Write a random tiny Llama and its tokenizer into ``output``; return the provenance."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tasks = _corpus_tasks(tasks_path, config.corpus_tasks)
    corpus = tokenizer_corpus(tasks, config.corpus_tasks)
    tokenizer = train_tokenizer(corpus, config.vocab_size, config.max_position_embeddings)
    # Like Llama 3.1's generation config: end of turn, end of text and end of message all stop.
    stop_tokens = (END_OF_TURN_TOKEN, END_OF_TEXT_TOKEN, "<|eom_id|>")
    stop_ids = [tokenizer.convert_tokens_to_ids(token) for token in stop_tokens]
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=VLLM_CPU_HEAD_SIZE,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(model_config)
    warmup: dict[str, Any] = {}
    if config.warmup_steps:
        warmup = warm_up(model, tokenizer, tasks, config)
    model = model.to(getattr(torch, config.dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    n_params = sum(parameter.numel() for parameter in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d, from %d tasks", n_params, len(tokenizer), len(tasks))
    return {
        "source": "tiny",
        "name": f"tiny-llama-seed{config.seed}",
        "tasks": str(tasks_path),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "config": config.model_dump(),
        "warmup": warmup,
    }


# ---------------------------------------------------------------- random full-size model


def llama3_tokenizer(texts: list[str], bpe_vocab_size: int, max_length: int) -> Any:
    """A byte-level BPE learnt from ``texts``, padded to the Llama 3 vocabulary with its special ids.

    Filler tokens (never produced: no merge leads to them) fill the ids between the learnt BPE and
    128,000, so that the 256 special tokens land at their real ids.
    """
    from tokenizers import Tokenizer

    learnt = train_tokenizer(texts, bpe_vocab_size, max_length)._tokenizer
    data = json.loads(learnt.to_str())
    vocab = {token: i for token, i in data["model"]["vocab"].items() if token not in SPECIAL_TOKENS}
    # Renumber densely (the learnt specials sat at ids 0-7), then fill up to the first special id.
    vocab = {token: i for i, token in enumerate(sorted(vocab, key=vocab.__getitem__))}
    vocab.update((f"<|filler_{i}|>", i) for i in range(len(vocab), LLAMA3_FIRST_SPECIAL_ID))
    data["model"]["vocab"] = vocab
    data["added_tokens"] = [
        {
            "id": LLAMA3_FIRST_SPECIAL_ID + i,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, token in enumerate(LLAMA3_SPECIAL_TOKENS)
    ]
    for processor in data["post_processor"]["processors"]:
        if processor["type"] == "TemplateProcessing":
            processor["special_tokens"][BEGIN_OF_TEXT_TOKEN]["ids"] = [LLAMA3_FIRST_SPECIAL_ID]
    tokenizer = Tokenizer.from_str(json.dumps(data))
    if tokenizer.get_vocab_size() != LLAMA3_VOCAB_SIZE:
        raise RuntimeError(f"built a vocabulary of {tokenizer.get_vocab_size()} tokens, not {LLAMA3_VOCAB_SIZE}")
    return _llama31_fast_tokenizer(tokenizer, max_length)


def build_random_model(tasks_path: Path, output: Path, config: RandomModelConfig) -> dict[str, Any]:
    """Write random weights of ``config.shape`` and a full Llama 3 tokenizer into ``output``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tasks = _corpus_tasks(tasks_path, config.corpus_tasks)
    shape = config.shape
    tokenizer = llama3_tokenizer(tokenizer_corpus(tasks, config.corpus_tasks), config.bpe_vocab_size, 131072)
    stop_ids = [tokenizer.convert_tokens_to_ids(token) for token in (END_OF_TEXT_TOKEN, "<|eom_id|>", END_OF_TURN_TOKEN)]
    model_config = LlamaConfig(
        vocab_size=LLAMA3_VOCAB_SIZE,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.hidden_size // shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-5,
        rope_theta=shape.rope_theta,
        rope_scaling=shape.rope_scaling,
        tie_word_embeddings=False,
        hidden_act="silu",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, config.dtype)
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    # Initialised on the device in the target dtype: an 8B model in float32 on a CPU takes minutes.
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(model_config)
    finally:
        torch.set_default_dtype(default_dtype)
    init_seconds = time.perf_counter() - started
    warmup: dict[str, Any] = {}
    if config.warmup_steps:
        warmup = warm_up(model, tokenizer, tasks, config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id
    )
    started = time.perf_counter()
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    save_seconds = time.perf_counter() - started
    n_params = sum(parameter.numel() for parameter in model.parameters())
    log.info(
        "random model: %d parameters (%s, %s), vocabulary %d; init %.1f s, save %.1f s",
        n_params, config.dtype, device, len(tokenizer), init_seconds, save_seconds,
    )
    return {
        "source": "random",
        "name": f"random-llama-{n_params / 1e9:.1f}b-seed{config.seed}",
        "tasks": str(tasks_path),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "device": device,
        "init_seconds": round(init_seconds, 2),
        "save_seconds": round(save_seconds, 2),
        "config": config.model_dump(),
        "warmup": warmup,
    }


# ---------------------------------------------------------------- answer-format warm-up

WARMUP_TAIL = (8, 24)  # an example keeps the last 8..24 tokens of a real prompt
WARMUP_SAMPLE = 32  # and this many sampled from the rest (see warm_up)


def warmup_prompts(tasks: list[Any], tokenizer: Any, rng: Any) -> list[tuple[list[int], bool]]:
    """Token ids of real prompts, two per task: (ids, is_first_turn).

    A first-turn prompt of the randomly augmented task (it ends inside the assistant turn) and a
    refinement prompt (it ends with a new assistant header) after a random warm-up answer.
    """
    from arc_pipeline.domain.augmentation import Augmentation
    from arc_pipeline.domain.prompts import (
        first_turn_messages,
        refinement_messages,
        render_first_turn,
        render_refinement,
    )

    prompts = []
    for task in tasks:
        augmented = Augmentation.random(rng).apply_task(task)
        order = [int(i) for i in rng.permutation(len(task.train))]
        test_index = int(rng.integers(len(task.test)))
        first = render_first_turn(tokenizer, first_turn_messages(augmented, order, test_index))
        previous = "\n" + warmup_answer(WARMUP_BODIES[int(rng.integers(len(WARMUP_BODIES)))])
        second = render_refinement(
            tokenizer, refinement_messages(augmented, test_index, previous, augmented.train_inputs)
        )
        for text, is_first in ((first, True), (second, False)):
            prompts.append((tokenizer(text, add_special_tokens=False).input_ids, is_first))
    return prompts


def warm_up(
    model: Any, tokenizer: Any, tasks: list[Any], config: TinyModelConfig | RandomModelConfig
) -> dict[str, Any]:
    """Teach the random model the answer format, in place: a short supervised fine-tuning.

    Without it a random model never writes a fenced program, every prediction fails to parse and the
    refinement and training stages get no data. Each example is the tail of a real prompt (first turn
    or refinement) followed by a random warm-up answer and ``<|eot_id|>``; the loss covers only the
    answer (and the prompt's last token, which predicts its first token).

    Real prompts are thousands of tokens long; training on them would take minutes on a CPU. An
    example keeps the prompt's last few tokens and a random sample of the rest, all at their real
    positions; every query sees each sampled token with ``log(rest / sample)`` added to its attention
    score, as if each stood for the ``rest / sample`` tokens around it. So the model learns attention
    that the long prompts it meets at inference do not dilute.
    One thread, seeded: the matrices are small, threads only fight over a shared CPU (7x slower on
    a busy 2-core machine), and the weights do not depend on the number of cores.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _warm_up(model, tokenizer, tasks, config)
    finally:
        torch.set_num_threads(threads)


def _warm_up(
    model: Any, tokenizer: Any, tasks: list[Any], config: TinyModelConfig | RandomModelConfig
) -> dict[str, Any]:
    import math

    import numpy as np
    import torch
    from tqdm import tqdm

    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    prompts = warmup_prompts(tasks, tokenizer, rng)
    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN_TOKEN)
    answers = {
        is_first: [
            tokenizer(("\n" if is_first else "") + warmup_answer(body), add_special_tokens=False).input_ids + [eot]
            for body in WARMUP_BODIES
        ]
        for is_first in (True, False)
    }
    bos, pad = tokenizer.bos_token_id, tokenizer.pad_token_id
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device  # the random 8B model warms up on the GPU
    blocked = torch.finfo(dtype).min
    torch.manual_seed(config.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warmup_learning_rate, weight_decay=0.0)
    ramp = max(1, config.warmup_steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / ramp) * max(0.05, 1 - step / config.warmup_steps)
    )
    losses = []
    for _ in tqdm(range(config.warmup_steps), desc="answer-format warm-up", unit="step", mininterval=5):
        rows = []
        for _ in range(config.warmup_batch_size):
            prompt, is_first = prompts[int(rng.integers(len(prompts)))]
            tail = min(int(rng.integers(WARMUP_TAIL[0], WARMUP_TAIL[1] + 1)), len(prompt) - 1)
            rest = len(prompt) - 1 - tail  # tokens between <|begin_of_text|> and the tail
            sample = min(WARMUP_SAMPLE, rest)
            kept = np.sort(rng.choice(np.arange(1, 1 + rest), size=sample, replace=False))
            answer = answers[is_first][int(rng.integers(len(WARMUP_BODIES)))]
            ids = [bos, *(prompt[i] for i in kept), *prompt[-tail:], *answer]
            positions = [0, *kept.tolist(), *range(len(prompt) - tail, len(prompt) + len(answer))]
            rows.append((ids, positions, sample, tail, math.log(rest / sample) if sample else 0.0))
        width = max(len(ids) for ids, *_ in rows)
        input_ids = torch.full((len(rows), width), pad)
        position_ids = torch.zeros((len(rows), width), dtype=torch.long)
        targets = torch.full((len(rows), width), -100)
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        bias = torch.zeros((len(rows), 1, width, width), dtype=dtype)
        for row, (ids, positions, sample, tail, scale) in enumerate(rows):
            last = sample + tail  # index of the prompt's last token, which predicts the answer's first
            input_ids[row, : len(ids)] = torch.tensor(ids)
            position_ids[row, : len(ids)] = torch.tensor(positions)
            position_ids[row, len(ids) :] = positions[-1]
            targets[row, last : len(ids) - 1] = torch.tensor(ids[last + 1 :])  # next-token targets
            bias[row, 0, :, 1 : 1 + sample] = scale
            bias[row, 0, :, len(ids) :] = blocked  # padding
        bias.masked_fill_(~causal, blocked)
        input_ids, position_ids, targets, bias = (t.to(device) for t in (input_ids, position_ids, targets, bias))
        hidden = model.model(input_ids=input_ids, position_ids=position_ids, attention_mask=bias).last_hidden_state
        scored = targets != -100
        logits = model.lm_head(hidden[scored])  # only where a target is: most positions are prompt
        loss = torch.nn.functional.cross_entropy(logits.float(), targets[scored])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    del optimizer, scheduler  # the AdamW state of an 8B model is 32 GiB: free it before saving
    model.eval()
    seconds = time.perf_counter() - started
    final = float(np.mean(losses[-10:]))
    log.info("answer-format warm-up: %d steps in %.1f s, final loss %.3f", len(losses), seconds, final)
    return {"steps": len(losses), "seconds": round(seconds, 2), "final_loss": round(final, 4)}


# ---------------------------------------------------------------- hub and path


def download_hub_model(config: ModelStageConfig, output: Path) -> dict[str, Any]:
    """Download the hub repository into ``output`` and make its tokenizer pad with a distinct token."""
    from huggingface_hub import snapshot_download

    repo_id = config.name_or_path
    log.info("downloading %s (revision %s) into %s", repo_id, config.revision or "main", output)
    try:
        snapshot_download(
            repo_id=repo_id,
            revision=config.revision,
            local_dir=output,
            ignore_patterns=config.ignore_patterns or None,
        )
    except Exception as error:  # offline, unknown repo, gated, disk full: all end the stage the same way
        raise SystemExit(
            f"model: could not download {repo_id!r} (revision {config.revision or 'main'}) from the Hugging Face "
            f"hub: {type(error).__name__}: {error}\nOn a machine without hub access, download the model elsewhere "
            "and point the config at it: model: {source: path, name_or_path: /path/to/model-folder}"
        ) from None
    shutil.rmtree(output / ".cache", ignore_errors=True)  # huggingface_hub's download bookkeeping
    _check(output)
    fix_pad_token(output)
    return {"source": "hub", "name": repo_id, "revision": config.revision, "commit": _hub_commit(repo_id, config)}


def _hub_commit(repo_id: str, config: ModelStageConfig) -> str | None:
    try:
        from huggingface_hub import model_info

        return model_info(repo_id, revision=config.revision).sha
    except Exception:  # provenance only: never fail a finished download on it
        return None


def link_local_model(source: Path, output: Path) -> dict[str, Any]:
    """Link every file of a local model folder into ``output`` (weights are not copied).

    The tokenizer config files are copied instead, so the pad token can be fixed without touching
    the user's folder.
    """
    source = _check(source.expanduser()).resolve()
    for entry in source.iterdir():
        if entry.name in _TOKENIZER_CONFIGS:
            shutil.copyfile(entry, output / entry.name)
        elif entry.name != MARKER_FILE and not entry.name.startswith("."):
            (output / entry.name).symlink_to(entry)
    fix_pad_token(output)
    return {"source": "path", "name": str(source), "path": str(source)}


def _check(path: Path) -> Path:
    try:
        return check_model_dir(path)
    except ModelFolderError as error:
        raise SystemExit(f"model: {error}") from None


_TOKENIZER_CONFIGS = ("tokenizer_config.json", "special_tokens_map.json")


def fix_pad_token(model_dir: Path) -> bool:
    """Pad with ``<|finetune_right_pad_id|>`` where the saved config pads with an end token or not at all.

    Returns whether anything changed. A vocabulary without that token is left alone (``load_tokenizer``
    then names the problem).
    """
    vocab = _vocabulary(model_dir)
    if PAD_TOKEN not in vocab:
        log.warning("%s: no %s in the vocabulary; pad token left as it is", model_dir, PAD_TOKEN)
        return False
    changed = False
    for name in _TOKENIZER_CONFIGS:
        path = model_dir / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        pad = data.get("pad_token")
        pad_text = pad.get("content") if isinstance(pad, dict) else pad
        if name == "special_tokens_map.json" and pad is None:
            continue
        if pad_text in (None, END_OF_TURN_TOKEN, END_OF_TEXT_TOKEN):
            data["pad_token"] = PAD_TOKEN
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            log.info("%s: pad_token %r -> %r", path, pad_text, PAD_TOKEN)
            changed = True
    return changed


def _vocabulary(model_dir: Path) -> set[str]:
    tokens: set[str] = set()
    tokenizer_json = model_dir / "tokenizer.json"
    if tokenizer_json.is_file():
        data = json.loads(tokenizer_json.read_text())
        tokens.update(token["content"] for token in data.get("added_tokens", []))
        vocab = data.get("model", {}).get("vocab", {})
        tokens.update(vocab if isinstance(vocab, dict) else [])
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        decoder = json.loads(config.read_text()).get("added_tokens_decoder", {})
        tokens.update(entry.get("content") for entry in decoder.values())
    return tokens
