"""Loading the configuration: a file (YAML, or JSON5), then environment overrides.

Environment variables override the file: ``SANDGATE_<SECTION>__<KEY>`` (for example
``SANDGATE_SERVER__PORT=8000``), plus two shortcuts, ``SANDGATE_HOME`` and
``SANDGATE_RUNTIME``. Values from the environment are parsed as YAML scalars, so ``8000`` is a
number and ``false`` a boolean: that typing of environment text is the one coercion left.
Every error names the path of the offending key.

Strict input, as at every other edge: a key given twice in one mapping is an error naming the
key and both lines (YAML) or the key (JSON5), never "last one wins"; the loaded document must
be plain JSON data (``sandgate.strictjson.check_value``: string keys, no ``.nan``/``.inf``, no
YAML timestamps or binary, integers within int64, nesting within the cap); and the schema is
applied in pydantic's strict mode on that JSON, so ``port: "8000"`` is an error rather than
8000, ``true`` is not 1 and ``1`` is not ``true``. Text still becomes what the schema names for
a path, an IP address or a network, which JSON can only spell as text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import json5
import yaml
from pydantic import ValidationError

from sandgate.config._model import Config
from sandgate.errors import ConfigError
from sandgate.strictjson import StrictJsonError, check_value

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
    origin = f" in {path}" if path is not None else ""
    try:
        check_value(data)
    except StrictJsonError as exc:
        raise ConfigError(f"invalid configuration{origin}: {exc}") from None
    try:
        return Config.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ConfigError(f"invalid configuration{origin}: {where}: {first['msg']}") from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        if path.suffix in {".json", ".json5"}:
            loaded = json5.loads(text, allow_duplicate_keys=False)
        else:
            loaded = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid: {exc}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return loaded


class _DuplicateKey(Exception):
    """A mapping of the config file names one key twice."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the
    last). Keys brought in by a ``<<`` merge may still be overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(
                    f"duplicate key {str(key)[:80]!r} at line {line} "
                    f"(first at line {seen[key]}): give each key once"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _env_keys(name: str) -> tuple[str, ...] | None:
    if name in _SHORTCUTS:
        return _SHORTCUTS[name]
    if not name.startswith(_PREFIX) or "__" not in name:
        return None
    return tuple(part.lower() for part in name[len(_PREFIX) :].split("__"))


def _parse_scalar(name: str, value: str) -> Any:
    try:
        return yaml.load(value, Loader=_StrictLoader) if value else value  # noqa: S506
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
