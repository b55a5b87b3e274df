"""The workflow config as Snakemake hands it over, made into one complete run before validation.

Called first in ``rules/common.smk``. One documented way to change a setting (README, "Changing a
setting"): a small file of overrides layered over a named preset, either by naming the preset in the
file (``base: barc-multiturn``) or by giving both files (``--configfile config/barc-multiturn.yaml
mine.yaml``). Here:

- ``base:`` is resolved (a preset name in ``config/``, ``default`` for the embedded default, or a path)
  and the file is layered over it;
- a config still missing whole sections is refused in one line: filling them from the schema's
  defaults would make a different run (GPU-sized sizes on a CPU) than the one the user meant;
- an unknown top-level key is named in one line with the closest valid key;
- ``--config`` values, which Snakemake reads as strings below the top level, get the schema's or the
  stage model's type (``--config 'evaluation={n_eval: 16}'``);
- ``evaluation.extra_adapters`` must name existing folders (a missing one would be ignored silently
  once a run has finished).
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from arc_pipeline.config_check import SECTION_MODELS, ConfigError, load_model

SCALARS = (bool, int, float, type(None))


def deep_merge(base: dict, top: dict) -> dict:
    """``top`` over ``base``: nested sections merge key by key, any other value replaces."""
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve_base(name: str, basedir: Path) -> Path:
    candidates = [Path(name), basedir / "config" / f"{name}.yaml", basedir / "config" / name]
    if name == "default":
        candidates.insert(0, basedir / "config" / "config.yaml")
    for path in candidates:
        if path.is_file():
            return path
    presets = sorted(p.stem for p in (basedir / "config").glob("*.yaml") if p.stem != "config")
    raise ConfigError(f"config key base: {name!r} is neither a file nor a preset; presets: default, "
                      f"{', '.join(presets)}")


def load_base(name: str, basedir: Path, seen: tuple[Path, ...] = ()) -> dict:
    path = resolve_base(name, basedir).resolve()
    if path in seen:
        raise ConfigError(f"config key base: {path} includes itself")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping")
    if "base" in data:
        data = deep_merge(load_base(str(data.pop("base")), basedir, (*seen, path)), data)
    return data


def _schema_node(schema: dict, keys: tuple[str, ...]) -> dict | None:
    node: Any = schema
    for key in keys:
        if not isinstance(node, dict):
            return None
        properties = node.get("properties", {})
        if key in properties:
            node = properties[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node if isinstance(node, dict) else None


def _annotation(keys: tuple[str, ...]) -> Any:
    """The pydantic annotation of the field at ``keys`` (None when no stage model declares it)."""
    for prefix, spec in SECTION_MODELS.items():
        if keys[: len(prefix)] != prefix or len(keys) == len(prefix):
            continue
        annotation: Any = load_model(spec)
        for key in keys[len(prefix):]:
            fields = getattr(annotation, "model_fields", None)
            if fields is None or key not in fields:
                return None
            annotation = fields[key].annotation
        return annotation
    return None


def _accepts_str(annotation: Any) -> bool:
    if annotation is str or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(isinstance(arg, str) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_str(arg) for arg in typing.get_args(annotation))
    return False


def _wants_string(keys: tuple[str, ...], schema: dict) -> bool:
    node = _schema_node(schema, keys)
    if node is not None and "type" in node:
        declared = node["type"] if isinstance(node["type"], list) else [node["type"]]
        return declared == ["string"]
    if node is not None and "enum" in node:
        return all(isinstance(v, str) for v in node["enum"])
    annotation = _annotation(keys)
    return annotation is None or _accepts_str(annotation)


def _coerce(value: Any, keys: tuple[str, ...], schema: dict) -> Any:
    if isinstance(value, dict):
        return {k: _coerce(v, (*keys, k), schema) for k, v in value.items()}
    if isinstance(value, list):
        return [_coerce_scalar(v, keys, schema, in_list=True) for v in value]
    return _coerce_scalar(value, keys, schema)


def _coerce_scalar(value: Any, keys: tuple[str, ...], schema: dict, in_list: bool = False) -> Any:
    if not isinstance(value, str):
        return _coerce(value, keys, schema) if isinstance(value, (dict, list)) else value
    if in_list:
        annotation = _annotation(keys)
        args = typing.get_args(annotation) if annotation is not None else ()
        node = _schema_node(schema, keys) or {}
        item_type = (node.get("items") or {}).get("type")
        if item_type == "string" or (args and _accepts_str(args[0])) or (not args and not item_type):
            return value
    elif _wants_string(keys, schema):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if isinstance(parsed, SCALARS) else value


def prepare_config(config: dict, overrides: dict, schema: dict, basedir: str | Path,
                   configfiles: list[str] | tuple[str, ...] = ()) -> None:
    """Complete ``config`` in place (see the module docstring); raise ConfigError with one line."""
    basedir = Path(basedir)
    if overrides:
        config.update(deep_merge(config, _coerce(overrides, (), schema)))
    if "base" in config:
        merged = deep_merge(load_base(str(config.pop("base")), basedir), config)
        config.clear()
        config.update(merged)
    known = list(schema.get("properties", {}))
    for key in config:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(known)}"
            raise ConfigError(f"unknown top-level config key {key!r}{hint}")
    missing = [key for key in schema.get("required", []) if key not in config]
    if missing:
        files = ", ".join(configfiles) or "the config"
        raise ConfigError(
            f"{files} lacks the sections {', '.join(missing)}: a file of a few overrides must name its preset "
            "(first line `base: default` or `base: barc-multiturn`) or follow a complete one "
            "(--configfile config/barc-multiturn.yaml yours.yaml)"
        )
    evaluation = config.get("evaluation") or {}
    for name, path in (evaluation.get("extra_adapters") or {}).items():
        if not Path(str(path)).expanduser().is_dir():
            raise ConfigError(f"evaluation.extra_adapters.{name}: adapter folder {path} not found "
                              f"(relative paths start at {Path.cwd()})")
