"""The ``--config-json`` argument every stage command takes: its section of the workflow config.

Snakemake passes the section from ``params:`` (``rules/common.smk``), already checked against
:class:`~arc_pipeline.config.workflow.WorkflowConfig`; run by hand, the stage checks it with the same model.
"""

from __future__ import annotations

import argparse
import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from arc_pipeline.config.errors import ConfigError, describe

Model = TypeVar("Model", bound=BaseModel)


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-json", default="{}", help="this stage's config section as JSON")


def parse_config(args: argparse.Namespace, model: type[Model]) -> Model:
    """Validate the section; a bad field fails with its name before any work starts."""
    try:
        value = json.loads(args.config_json)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--config-json is not valid JSON: {error}") from None
    try:
        return model.model_validate(value)
    except ValidationError as error:
        raise ConfigError(f"invalid --config-json for {model.__name__}:\n{describe(error, model)}") from None
