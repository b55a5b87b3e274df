"""``arc-pipeline merge-adapter``: a LoRA adapter merged into the base model, as a model folder of its own.

Run once per adapter when ``evaluate.merge_adapter`` is on; the evaluation's refinement inference then
loads the merged folder like a base model (no LoRA in vLLM: the base model's speed). The folder is built
beside ``--output`` and renamed into place, so a failed merge never leaves a half-written model behind.
Why merging is opt-in: arc_pipeline/models/merge.py.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.io import InputFileError, replace_folder
from arc_pipeline.models.merge import LARGE_ROUNDING_ERROR

log = logging.getLogger(__name__)


class MergeAdapterConfig(BaseModel):
    """``evaluate.merge``: how an adapter is merged into the base weights."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto",
        description="dtype of the merged weights; auto = the base model's (bf16 for BARC 8B). float32 keeps "
        "every update, but vLLM rounds the weights to inference.dtype as it loads them: it helps only there",
    )
    max_rounding_error: float = Field(
        LARGE_ROUNDING_ERROR,
        ge=0,
        description="fail the merge (leaving no merged folder) when rounding to dtype changes the adapter's update "
        "by more than this share of its norm: the merged model would not be the adapter as trained (the "
        "8B-shape GPU canary: 7.9%). Then evaluate with merge_adapter: false",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, required=True, help="base model folder (from the model stage)")
    parser.add_argument("--adapter", type=Path, required=True, help="PEFT LoRA adapter folder (from the train stage)")
    parser.add_argument("--output", type=Path, required=True, help="merged model folder to write (replaced atomically)")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import check_model_dir, model_name
    from arc_pipeline.models.merge import merge_adapter

    config = parse_config(args, MergeAdapterConfig)
    check_model_dir(args.model)
    if not args.adapter.exists():
        raise InputFileError(f"{args.adapter}: adapter folder not found")
    if not (args.adapter / "adapter_config.json").is_file():
        raise InputFileError(f"{args.adapter}: no adapter_config.json (not a PEFT adapter folder)")
    started = time.perf_counter()
    with replace_folder(args.output) as staging:
        merge_adapter(args.model, args.adapter, staging, config.dtype, config.max_rounding_error)
        check_model_dir(staging)
    log.info(
        "merged model %s (%s) ready in %.1f s", args.output, model_name(args.output), time.perf_counter() - started
    )
    return 0
