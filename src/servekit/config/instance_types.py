"""User-defined instance types: a YAML or TOML file read into plain, validated data (``servekit.services.hosting``
merges it over its bundled table). Every error names the file, the entry and the field.

YAML::

    instance_types:
      - name: ml.local.small
        vcpus: 1
        memory_gib: 2
        price_per_hour: 0

TOML::

    [[instance_types]]
    name = "ml.m5.large"      # a bundled name: this entry replaces it
    vcpus = 2
    memory_gib = 8
    price_per_hour = 0.1
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servekit.errors import ConfigError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,62}")
_FIELDS = ("name", "vcpus", "memory_gib", "price_per_hour")
_OPTIONAL = ("gpus", "gpu_memory_gib")  # GPU types: cards per instance and memory per card (0 = none)


@dataclass(frozen=True, slots=True)
class InstanceTypeEntry:
    """One user-defined instance type, as the file gives it."""

    name: str
    vcpus: int
    memory_gib: float
    price_per_hour: float
    gpus: int = 0
    gpu_memory_gib: float = 0.0


def parse_instance_types(text: str, source: str) -> tuple[InstanceTypeEntry, ...]:
    """Parse an instance-types file's text; YAML or TOML by ``source``'s suffix (``.yaml``/``.yml``/``.toml``)."""
    suffix = Path(source).suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            data: Any = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    elif suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    else:
        raise ConfigError(f"{source}: an instance-types file is .yaml, .yml or .toml")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping with an instance_types list")
    unknown = sorted(set(data) - {"instance_types"})
    if unknown:
        raise ConfigError(f"{source}: unknown top-level keys {unknown}; expected instance_types")
    entries = data.get("instance_types", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: instance_types must be a list of entries")
    parsed = tuple(_entry(raw, f"{source}: instance_types[{i}]") for i, raw in enumerate(entries))
    seen: set[str] = set()
    for i, entry in enumerate(parsed):
        if entry.name in seen:
            raise ConfigError(f"{source}: instance_types[{i}].name: {entry.name!r} is defined twice")
        seen.add(entry.name)
    return parsed


def load_instance_types_file(path: str | os.PathLike[str]) -> tuple[InstanceTypeEntry, ...]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read instance-types file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read instance-types file {p}: not UTF-8 text") from None
    return parse_instance_types(text, str(p))


def _entry(raw: Any, where: str) -> InstanceTypeEntry:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: an entry is a mapping of {', '.join(_FIELDS)}")
    unknown = sorted(set(raw) - set(_FIELDS) - set(_OPTIONAL))
    if unknown:
        raise ConfigError(
            f"{where}: unknown fields {unknown}; expected {', '.join(_FIELDS)} (and optionally {', '.join(_OPTIONAL)})"
        )
    missing = [f for f in _FIELDS if f not in raw]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}")
    name = raw["name"]
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ConfigError(f"{where}.name: {name!r} is not a name (letters, digits, '.' and '-', at most 63)")
    vcpus = raw["vcpus"]
    if isinstance(vcpus, bool) or not isinstance(vcpus, int) or vcpus < 1:
        raise ConfigError(f"{where}.vcpus: must be a whole number of at least 1, got {vcpus!r}")
    gpus = raw.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ConfigError(f"{where}.gpus: must be a whole number of at least 0, got {gpus!r}")
    return InstanceTypeEntry(
        name=name,
        vcpus=vcpus,
        memory_gib=_number(raw["memory_gib"], f"{where}.memory_gib", positive=True),
        price_per_hour=_number(raw["price_per_hour"], f"{where}.price_per_hour", positive=False),
        gpus=gpus,
        gpu_memory_gib=_number(raw.get("gpu_memory_gib", 0), f"{where}.gpu_memory_gib", positive=False),
    )


def _number(value: Any, where: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{where}: must be {'more than' if positive else 'at least'} 0, got {value!r}")
    return float(value)
