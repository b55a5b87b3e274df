"""The offline tokenizers, with the Llama 3.1 special tokens and chat template.

- :func:`train_tokenizer`: a small byte-level BPE learnt from the tasks' prompts (the tiny model's);
- :func:`llama3_tokenizer`: the same padded to the real Llama 3 vocabulary (128,256 ids, the special
  tokens at their real ids), for random weights of the real architecture.

Both are trained on :func:`tokenizer_corpus`: the prompts the pipeline renders, an example answer,
some Python sources and the warm-up answers, so that what the models read and write tokenizes sensibly.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from arc_pipeline.models.tokens import (
    BEGIN_OF_TEXT_TOKEN,
    END_OF_MESSAGE_TOKEN,
    END_OF_TEXT_TOKEN,
    END_OF_TURN_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
)
from arc_pipeline.models.warmup import WARMUP_BODIES, warmup_answer

log = logging.getLogger(__name__)

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
EXAMPLE_ANSWER = """```python
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
"""

# The warm-up answers go into the corpus this many times, so that their words become single tokens.
WARMUP_CORPUS_REPEATS = 20

# Modules whose Python source (code and docstrings) gives the tokenizer a general code vocabulary.
CODE_MODULES = (
    "numpy.lib._function_base_impl",
    "numpy.lib._shape_base_impl",
    "numpy._core.numeric",
    "collections",
    "statistics",
)

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
    END_OF_MESSAGE_TOKEN,
    END_OF_TURN_TOKEN,
    "<|python_tag|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(3, 248)),
)


def tokenizer_corpus(tasks: list[Any], max_tasks: int, bodies: tuple[str, ...] = WARMUP_BODIES) -> list[str]:
    """Texts the tiny tokenizer learns its merges from: first-turn and refinement messages, an answer."""
    from arc_pipeline.domain.prompts import first_turn_messages, refinement_messages

    texts: list[str] = [EXAMPLE_ANSWER, *_module_sources(CODE_MODULES)]
    # The warm-up answers, often enough that their words become single tokens (short completions).
    texts.extend(warmup_answer(body) for body in bodies for _ in range(WARMUP_CORPUS_REPEATS))
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


def corpus_tasks(tasks_path: Path, max_tasks: int) -> list[Any]:
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
