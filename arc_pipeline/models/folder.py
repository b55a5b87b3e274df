"""Loading the pipeline's model folder (``results/model/base``), the same way for every source.

The ``model`` stage always writes a complete Hugging Face model folder (tiny, downloaded, or links to
a local one) plus ``model.json`` saying where it came from, so later stages load the real BARC model
and the tiny test model through the same calls.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.models.tokens import PAD_TOKEN, pads_with_an_end_token

log = logging.getLogger(__name__)

MARKER_FILE = "model.json"


class ModelFolderError(PipelineError, RuntimeError):
    """A model folder is missing files or has an unusable tokenizer; the message names the folder."""


def check_model_dir(model_dir: str | os.PathLike) -> Path:
    """Raise ModelFolderError unless the folder has a model config and a tokenizer."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ModelFolderError(f"{path}: model folder not found")
    if not (path / "config.json").is_file():
        raise ModelFolderError(f"{path}: no config.json (not a Hugging Face model folder)")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise ModelFolderError(f"{path}: no tokenizer files (tokenizer.json, tokenizer.model or vocab.json)")
    return path


def read_model_info(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The ``model.json`` provenance the model stage writes; ``{}`` for a folder made elsewhere."""
    marker = Path(model_dir) / MARKER_FILE
    if not marker.is_file():
        return {}
    return json.loads(marker.read_text())


def model_name(model_dir: str | os.PathLike) -> str:
    """A short name for provenance columns: the hub id, the local path, or ``tiny-llama-seed{N}``."""
    info = read_model_info(model_dir)
    return str(info.get("name") or Path(model_dir).resolve().name)


def load_tokenizer(model_dir: str | os.PathLike) -> Any:
    """The folder's tokenizer with a pad token distinct from the end-of-turn token.

    A folder whose tokenizer pads with the end-of-turn (or end-of-text) token, or not at all, gets
    ``<|finetune_right_pad_id|>`` if its vocabulary has it; otherwise it is refused, because training
    would then learn to never stop (padding positions are masked out of the loss).
    """
    from transformers import AutoTokenizer

    path = check_model_dir(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if pads_with_an_end_token(tokenizer):
        if PAD_TOKEN not in tokenizer.get_vocab():
            raise ModelFolderError(
                f"{path}: the tokenizer pads with {tokenizer.pad_token!r} (an end token or none) and has no "
                f"{PAD_TOKEN!r} to pad with instead; set a distinct pad_token in its tokenizer_config.json"
            )
        log.info("%s: pad token %r replaced by %r", path, tokenizer.pad_token, PAD_TOKEN)
        tokenizer.pad_token = PAD_TOKEN
    if tokenizer.chat_template is None:
        raise ModelFolderError(f"{path}: the tokenizer has no chat template")
    return tokenizer
