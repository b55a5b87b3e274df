"""Config errors, one line per bad field, naming the field by its place in the workflow config."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

from arc_pipeline.errors import PipelineError


class ConfigError(PipelineError, ValueError):
    """A config value the run cannot use; the message names the field (``train.learning_rate``)."""


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model that owns the field at ``loc`` (None when the path leaves the models)."""
    for key in loc:
        field = model.model_fields.get(str(key))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def describe(error: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """Each of pydantic's errors as ``field.path: message``; an unknown key names the closest known one."""
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        path = ".".join(str(part) for part in (*([prefix] if prefix else []), *loc)) or prefix or "config"
        if item["type"] == "extra_forbidden":
            owner = _model_at(model, loc[:-1])
            known = sorted(owner.model_fields) if owner is not None else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            lines.append(f"{path}: unknown field; {hint}")
        elif item["type"] == "missing":
            lines.append(f"{path}: required")
        else:
            value = repr(item.get("input"))
            value = value if len(value) <= 60 else value[:57] + "..."
            lines.append(f"{path}: {item['msg']} (got {value})")
    return "\n".join(lines)
