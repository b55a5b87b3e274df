"""The ``--config-json`` argument every stage command takes: its slice of the workflow config."""

from __future__ import annotations

import argparse
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from arc_pipeline.errors import PipelineError

Model = TypeVar("Model", bound=BaseModel)


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-json", default="{}", help="this stage's config slice as JSON")


def check_unknown_fields(value: Any, model: type[BaseModel], section: str) -> None:
    """Reject keys the model does not know (a typo must not silently fall back to a default)."""
    if not isinstance(value, dict) or model.model_config.get("extra") == "allow":
        return
    known = set(model.model_fields)
    for field in model.model_fields.values():
        if field.alias:
            known.add(field.alias)
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"config section '{section}' has unknown fields {unknown}; known: {sorted(known)}")


def parse_config(args: argparse.Namespace, model: type[Model]) -> Model:
    """Validate the slice; a bad field fails with its name before any work starts."""
    try:
        value = json.loads(args.config_json)
        check_unknown_fields(value, model, model.__name__)
        return model.model_validate(value)
    except json.JSONDecodeError as error:
        raise PipelineError(f"--config-json is not valid JSON: {error}") from None
    except (ValidationError, ValueError) as error:
        raise PipelineError(f"invalid config for {model.__name__}:\n{error}") from None
