"""Stage ``barc_download``: fetch BARC's ``data_100k.jsonl`` (or copy a local/bundled jsonl).

The real dataset lives on the Hugging Face hub (``source: hub``); ``source: local`` copies a jsonl you
downloaded yourself, ``source: bundled`` copies the small sample shipped in the package (the
embedded default, made from ARC-AGI-1 training tasks by ``scripts/make_barc_sample.py``), and
``source: canary`` writes rows of the learning canary's task family (arc_pipeline/domain/canary.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.canary import CanaryTasksConfig, canary_rows
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import InputFileError

log = logging.getLogger(__name__)

BARC_DATASET = "barc0/200k_HEAVY_gpt4o-description-gpt4omini-code_generated_problems"


class BarcDownloadConfig(BaseModel):
    """Where the BARC jsonl comes from."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["hub", "local", "bundled", "canary"] = Field(
        "bundled", description="where the jsonl comes from (canary: generated canary tasks, see canary)"
    )
    repo_id: str = Field(BARC_DATASET, description="hub dataset repository (source: hub)")
    filename: str = Field("data_100k.jsonl", description="file inside the dataset repository")
    revision: str = Field("main", description="hub revision: branch, tag or commit")
    local_path: str | None = Field(None, description="a jsonl on disk (source: local)")
    canary: CanaryTasksConfig = Field(
        default_factory=CanaryTasksConfig, description="the canary training tasks (source: canary)"
    )


def bundled_sample_path() -> Path:
    return Path(str(resources.files("arc_pipeline") / "data" / "barc_sample.jsonl"))


def download_from_hub(config: BarcDownloadConfig, output: Path) -> None:
    from huggingface_hub import hf_hub_download

    try:
        with tempfile.TemporaryDirectory(dir=output.parent) as cache:
            path = hf_hub_download(
                repo_id=config.repo_id,
                filename=config.filename,
                repo_type="dataset",
                revision=config.revision,
                cache_dir=cache,
            )
            shutil.copyfile(path, output)
    except Exception as error:  # the hub client raises many types for "no network"
        raise PipelineError(
            f"could not download {config.filename} from the dataset {config.repo_id}@{config.revision}: "
            f"{type(error).__name__}: {error}\n"
            "Offline? Download the file on a machine with access and set in your config:\n"
            "  barc:\n    download:\n      source: local\n      local_path: /path/to/data_100k.jsonl"
        ) from None


def fetch(config: BarcDownloadConfig, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    if config.source == "hub":
        download_from_hub(config, partial)
    elif config.source == "canary":
        partial.write_text("".join(json.dumps(row) + "\n" for row in canary_rows(config.canary)))
    else:
        source = bundled_sample_path() if config.source == "bundled" else Path(config.local_path or "")
        if config.source == "local" and not config.local_path:
            raise PipelineError("barc.download.local_path must be set when barc.download.source is 'local'")
        if not source.is_file():
            raise InputFileError(f"{source}: BARC jsonl not found (barc.download.local_path)")
        shutil.copyfile(source, partial)
    partial.replace(output)
    log.info("BARC data (%s) -> %s", config.source, output)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, required=True, help="where to write the jsonl")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> None:
    fetch(parse_config(args, BarcDownloadConfig), args.output)
