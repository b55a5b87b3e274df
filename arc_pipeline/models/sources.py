"""The ``hub`` and ``path`` sources: a published model folder, downloaded or linked, with its pad fixed.

The saved tokenizer config then pads with ``<|finetune_right_pad_id|>`` instead of ``<|eot_id|>``, as the
published run did by hand (docs/prompts.md); the user's own folder is never modified.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.models.folder import MARKER_FILE, check_model_dir
from arc_pipeline.models.tokens import PAD_TOKEN, REPLACED_PADS

log = logging.getLogger(__name__)

_TOKENIZER_CONFIGS = ("tokenizer_config.json", "special_tokens_map.json")


def download_hub_model(repo_id: str, revision: str | None, ignore_patterns: list[str], output: Path) -> dict[str, Any]:
    """Download the hub repository into ``output`` and make its tokenizer pad with a distinct token."""
    from huggingface_hub import snapshot_download

    log.info("downloading %s (revision %s) into %s", repo_id, revision or "main", output)
    try:
        snapshot_download(repo_id=repo_id, revision=revision, local_dir=output, ignore_patterns=ignore_patterns or None)
    except Exception as error:  # offline, unknown repo, gated, disk full: all end the stage the same way
        raise PipelineError(
            f"model: could not download {repo_id!r} (revision {revision or 'main'}) from the Hugging Face "
            f"hub: {type(error).__name__}: {error}\nOn a machine without hub access, download the model elsewhere "
            "and point the config at it: model: {source: path, name_or_path: /path/to/model-folder}"
        ) from None
    shutil.rmtree(output / ".cache", ignore_errors=True)  # huggingface_hub's download bookkeeping
    check_model_dir(output)
    fix_pad_token(output)
    return {"source": "hub", "name": repo_id, "revision": revision, "commit": _hub_commit(repo_id, revision)}


def _hub_commit(repo_id: str, revision: str | None) -> str | None:
    try:
        from huggingface_hub import model_info

        return model_info(repo_id, revision=revision).sha
    except Exception:  # provenance only: never fail a finished download on it
        return None


def link_local_model(source: Path, output: Path) -> dict[str, Any]:
    """Link every file of a local model folder into ``output`` (weights are not copied).

    The tokenizer config files are copied instead, so the pad token can be fixed without touching
    the user's folder.
    """
    source = check_model_dir(source.expanduser()).resolve()
    for entry in source.iterdir():
        if entry.name in _TOKENIZER_CONFIGS:
            shutil.copyfile(entry, output / entry.name)
        elif entry.name != MARKER_FILE and not entry.name.startswith("."):
            (output / entry.name).symlink_to(entry)
    fix_pad_token(output)
    return {"source": "path", "name": str(source), "path": str(source)}


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
        if pad_text in REPLACED_PADS:
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
