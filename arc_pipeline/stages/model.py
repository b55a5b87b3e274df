"""``arc-pipeline model``: produce the base model folder every later stage loads.

Four sources, one kind of output (a Hugging Face model folder plus ``model.json``, the contract of
arc_pipeline/models/folder.py):

- ``tiny``: a tiny Llama and its own small tokenizer, built offline in under a minute and warmed up to
  answer with trivial programs, so the whole workflow runs on a CPU (arc_pipeline/models/tiny.py);
- ``hub``: ``huggingface_hub.snapshot_download`` of e.g. ``barc0/Llama-3.1-ARC-Potpourri-Induction-8B``;
- ``path``: an existing local folder, linked file by file (no copy of the weights);
- ``random``: random weights of a real architecture (by default Llama-3.1-8B) with a full Llama 3
  tokenizer, for GPU smoke runs without network (arc_pipeline/models/random.py).

For ``hub`` and ``path`` the saved tokenizer config pads with ``<|finetune_right_pad_id|>`` instead of
``<|eot_id|>``, as the published run did by hand (docs/prompts.md; arc_pipeline/models/sources.py). The
folder is built beside ``--output`` and renamed into place, so a failed run never leaves a half-written
model behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import check_parquet, replace_folder
from arc_pipeline.models.folder import MARKER_FILE, check_model_dir
from arc_pipeline.models.random import RandomModelConfig, build_random_model
from arc_pipeline.models.sources import download_hub_model, link_local_model
from arc_pipeline.models.tiny import TinyModelConfig, build_tiny_model
from arc_pipeline.schemas import TASKS_SCHEMA

log = logging.getLogger(__name__)


class ModelStageConfig(BaseModel):
    """Where the base model comes from (the workflow config's ``model`` section)."""

    model_config = ConfigDict(extra="forbid")

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
        raise PipelineError(
            f"model: source {config.source!r} needs --tasks (a tasks parquet to train its tokenizer on)"
        )
    if args.tasks:
        check_parquet(args.tasks, TASKS_SCHEMA)  # before torch's import, which takes seconds
    started = time.perf_counter()
    with replace_folder(output) as staging:
        if config.source == "tiny":
            info = build_tiny_model(Path(args.tasks), staging, config.tiny)
        elif config.source == "random":
            info = build_random_model(Path(args.tasks), staging, config.random)
        elif config.source == "hub":
            info = download_hub_model(config.name_or_path, config.revision, config.ignore_patterns, staging)
        else:
            info = link_local_model(Path(config.name_or_path), staging)
        info["build_seconds"] = round(time.perf_counter() - started, 2)
        (staging / MARKER_FILE).write_text(json.dumps(info, indent=2) + "\n")
        check_model_dir(staging)
    log.info("model folder %s ready (%s) in %.1f s", output, info["name"], info["build_seconds"])
    return 0
