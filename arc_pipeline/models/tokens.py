"""The Llama 3.1 tokens the pipeline relies on, and the rules built on them.

- the pad rule: training needs a pad token that is not an end token (docs/prompts.md), because padding
  positions are masked out of the loss and a model padded with ``<|eot_id|>`` would learn never to stop;
  the published run replaced ``<|eot_id|>`` by the reserved fine-tuning pad token;
- whether plain tokenization prepends BOS (Llama 3's does), which decides where a rendered BOS is stripped;
- the ids that end a completion.

Only tokenizer and model *objects* are read here (no transformers import): the rules serve the model
stage, the stages that load the model folder and training alike.
"""

from __future__ import annotations

from typing import Any

BEGIN_OF_TEXT_TOKEN = "<|begin_of_text|>"
END_OF_TEXT_TOKEN = "<|end_of_text|>"
END_OF_TURN_TOKEN = "<|eot_id|>"
END_OF_MESSAGE_TOKEN = "<|eom_id|>"
PAD_TOKEN = "<|finetune_right_pad_id|>"

# The Llama 3.1 special tokens (the real vocabulary also has reserved ones the pipeline never uses).
SPECIAL_TOKENS = (
    BEGIN_OF_TEXT_TOKEN,
    END_OF_TEXT_TOKEN,
    "<|start_header_id|>",
    "<|end_header_id|>",
    END_OF_TURN_TOKEN,
    PAD_TOKEN,
    END_OF_MESSAGE_TOKEN,
    "<|python_tag|>",
)

# Pad tokens (as written in a saved tokenizer config) that the pad rule replaces by PAD_TOKEN.
REPLACED_PADS = (None, END_OF_TURN_TOKEN, END_OF_TEXT_TOKEN)


def end_token_ids(tokenizer: Any) -> set[int]:
    """The tokenizer's eos id and the ids of the end-of-turn and end-of-text tokens it has."""
    ids = {tokenizer.eos_token_id}
    vocab = tokenizer.get_vocab()
    ids.update(vocab[token] for token in (END_OF_TURN_TOKEN, END_OF_TEXT_TOKEN) if token in vocab)
    return {i for i in ids if i is not None}


def pads_with_an_end_token(tokenizer: Any) -> bool:
    """Whether the tokenizer pads with an end token or not at all (the pad rule then replaces its pad)."""
    return tokenizer.pad_token is None or tokenizer.pad_token_id in end_token_ids(tokenizer)


def adds_bos(tokenizer: Any) -> bool:
    """Whether plain tokenization prepends the BOS token (Llama 3 does)."""
    if tokenizer.bos_token_id is None:
        return False
    ids = tokenizer("a")["input_ids"]
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a completion for TRL: generation config eos ids, tokenizer eos, and pad."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    ids += [tokenizer.eos_token_id, tokenizer.pad_token_id]
    return sorted({int(i) for i in ids if i is not None})
