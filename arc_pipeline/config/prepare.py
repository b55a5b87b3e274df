"""The workflow config as Snakemake hands it over, made into one complete, validated run.

Called first in ``rules/common.smk``. One documented way to change a setting (README, "Changing a
setting"): a small file of overrides layered over a named preset, either by naming the preset in the
file (``base: barc-multiturn``) or by giving both files (``--configfile config/barc-multiturn.yaml
mine.yaml``). Here:

- ``base:`` is resolved (a preset name in ``config/``, ``default`` for the embedded default, or a path)
  and the file is layered over it;
- sections under their old names (``training:``) are read under the new ones (``train:``), with a warning;
- a config still missing whole sections is refused in one line: filling them from the defaults would make
  a different run (GPU-sized sizes on a CPU) than the one the user meant;
- ``--config`` values, which Snakemake reads as strings below the top level, get the field's type
  (``--config 'evaluate={n_eval: 16}'``);
- the result is checked by :class:`~arc_pipeline.config.workflow.WorkflowConfig` (one line per bad field,
  an unknown key names the closest known one) and written back complete, defaults included, so each
  rule's ``params:`` slice is exactly what its stage runs with;
- ``evaluate.extra_adapters`` must name existing folders (a missing one would be ignored silently once a
  run has finished).
"""

from __future__ import annotations

import difflib
import logging
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from arc_pipeline.config.errors import ConfigError, describe
from arc_pipeline.config.workflow import REMOVED_FIELDS, RENAMED_FIELDS, RENAMED_SECTIONS, WorkflowConfig

log = logging.getLogger(__name__)

SCALARS = (bool, int, float, type(None))
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:  # Snakemake may parse the workflow more than once per run
        _warned.add(message)
        log.warning(message)


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
    raise ConfigError(
        f"config key base: {name!r} is neither a file nor a preset; presets: default, {', '.join(presets)}"
    )


def load_base(name: str, basedir: Path, seen: tuple[Path, ...] = ()) -> dict:
    path = resolve_base(name, basedir).resolve()
    if path in seen:
        raise ConfigError(f"config key base: {path} includes itself")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping")
    data = renamed_keys(data)
    if "base" in data:
        data = deep_merge(load_base(str(data.pop("base")), basedir, (*seen, path)), data)
    return data


def renamed_keys(config: dict) -> dict:
    """Old section and field names under their new ones (values under the old name win: the user's
    override file uses them over a preset that uses the new ones); removed fields fail saying why."""
    config = dict(config)
    for old, new in RENAMED_SECTIONS.items():
        if old in config:
            _warn_once(f"config section {old!r} is now {new!r} (docs/config-reference.md): read as {new!r}")
            value = config.pop(old)
            both = isinstance(value, dict) and isinstance(config.get(new), dict)
            config[new] = deep_merge(config[new], value) if both else value
    for (section, old), new in RENAMED_FIELDS.items():
        value = config.get(section)
        if isinstance(value, dict) and old in value:
            _warn_once(f"config key {section}.{old} is now {section}.{new}: read as {section}.{new}")
            value = dict(value)
            moved = value.pop(old)
            both = isinstance(moved, dict) and isinstance(value.get(new), dict)
            value[new] = deep_merge(value[new], moved) if both else moved
            config[section] = value
    for (section, field), why in REMOVED_FIELDS.items():
        if isinstance(config.get(section), dict) and field in config[section]:
            raise ConfigError(f"config key {section}.{field} was removed: {why}")
    return config


def field_annotation(keys: tuple[str, ...]) -> Any:
    """The pydantic annotation of the field at ``keys`` (None when no model declares it)."""
    annotation: Any = WorkflowConfig
    for key in keys:
        fields = getattr(annotation, "model_fields", None)
        if fields is None or key not in fields:
            return None
        annotation = fields[key].annotation
    return annotation


def _accepts_str(annotation: Any) -> bool:
    if annotation is None or annotation is str or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(isinstance(arg, str) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_str(arg) for arg in typing.get_args(annotation))
    return False


def _coerce(value: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _coerce(v, (*keys, k)) for k, v in value.items()}
    if isinstance(value, list):
        args = typing.get_args(field_annotation(keys))
        item = args[0] if args else None
        return [_parse_scalar(v) if isinstance(v, str) and not _accepts_str(item) else v for v in value]
    if isinstance(value, str) and not _accepts_str(field_annotation(keys)):
        return _parse_scalar(value)
    return value


def _parse_scalar(value: str) -> Any:
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if isinstance(parsed, SCALARS) else value


def required_sections() -> list[str]:
    return [name for name, field in WorkflowConfig.model_fields.items() if field.is_required()]


def validate(config: dict) -> WorkflowConfig:
    """The config as :class:`WorkflowConfig`; ConfigError with one line per bad field."""
    try:
        return WorkflowConfig.model_validate(config)
    except ValidationError as error:
        raise ConfigError(f"invalid config:\n{describe(error, WorkflowConfig)}") from None


def prepare_config(
    config: dict, overrides: dict, basedir: str | Path, configfiles: list[str] | tuple[str, ...] = ()
) -> WorkflowConfig:
    """Complete ``config`` in place (see the module docstring) and return it validated."""
    basedir = Path(basedir)
    merged = renamed_keys(config)
    if overrides:
        merged = deep_merge(merged, _coerce(renamed_keys(overrides), ()))
    if "base" in merged:
        merged = deep_merge(load_base(str(merged.pop("base")), basedir), merged)
    known = list(WorkflowConfig.model_fields)
    for key in merged:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(known)}"
            raise ConfigError(f"unknown top-level config key {key!r}{hint}")
    missing = [key for key in required_sections() if key not in merged]
    if missing:
        files = ", ".join(configfiles) or "the config"
        raise ConfigError(
            f"{files} lacks the sections {', '.join(missing)}: a file of a few overrides must name its preset "
            "(first line `base: default` or `base: barc-multiturn`) or follow a complete one "
            "(--configfile config/barc-multiturn.yaml yours.yaml)"
        )
    workflow_config = validate(merged)
    for name, path in workflow_config.evaluate.extra_adapters.items():
        if not Path(path).expanduser().is_dir():
            raise ConfigError(
                f"evaluate.extra_adapters.{name}: adapter folder {path} not found "
                f"(relative paths start at {Path.cwd()})"
            )
    config.clear()
    config.update(workflow_config.model_dump(mode="json"))
    return workflow_config
