"""Loading the configuration: a file (YAML, or JSON5), then environment overrides.

Environment variables override the file: ``SANDGATE_<SECTION>__<KEY>`` (for example
``SANDGATE_SERVER__PORT=8000``), plus two shortcuts, ``SANDGATE_HOME`` and
``SANDGATE_RUNTIME``. Values from the environment are parsed as YAML scalars, so ``8000`` is a
number and ``false`` a boolean. Every error names the path of the offending key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import json5
import yaml
from pydantic import ValidationError

from sandgate.config._model import Config
from sandgate.errors import ConfigError

_PREFIX = "SANDGATE_"
_SHORTCUTS = {"SANDGATE_HOME": ("home",), "SANDGATE_RUNTIME": ("runtime", "kind")}


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Returns the validated configuration; raises ``ConfigError`` naming the bad key."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = _read_file(path) if path is not None else {}
    for name, value in sorted(env.items()):
        keys = _env_keys(name)
        if keys is not None:
            _set_path(data, keys, _parse_scalar(name, value))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        origin = f" in {path}" if path is not None else ""
        raise ConfigError(f"invalid configuration{origin}: {where}: {first['msg']}") from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        loaded = json5.loads(text) if path.suffix in {".json", ".json5"} else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid: {exc}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return loaded


def _env_keys(name: str) -> tuple[str, ...] | None:
    if name in _SHORTCUTS:
        return _SHORTCUTS[name]
    if not name.startswith(_PREFIX) or "__" not in name:
        return None
    return tuple(part.lower() for part in name[len(_PREFIX) :].split("__"))


def _parse_scalar(name: str, value: str) -> Any:
    try:
        return yaml.safe_load(value) if value else value
    except yaml.YAMLError:
        raise ConfigError(f"environment variable {name} is not a valid value") from None


def _set_path(data: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot override {'.'.join(keys)}: {key} is not a section")
        node = child
    node[keys[-1]] = value
