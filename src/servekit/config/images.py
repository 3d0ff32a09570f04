"""The images a user maps to local programs for SageMaker jobs: a YAML file (``<home>/images.yaml``, which
``servekit images add`` writes; or any file given to ``servekit up --images``). Every error names the file, the
entry and the field.

YAML::

    images:
      # their own container: what runs instead of it (exactly this command, in the job's sandbox)
      - uri: 123456789012.dkr.ecr.us-east-1.amazonaws.com/my-algorithm:latest
        command: [python3, /srv/my-algorithm/train.py]
      # a framework image whose scripts need another Python (one with torch installed)
      - uri: pytorch-training
        python: /opt/venvs/torch/bin/python

``uri`` is an image URI, matched exactly, or a repository name, matching any account, region and tag.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servekit.errors import ConfigError

_FIELDS = ("uri", "command", "python")
_URI = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@\-]{0,511}")


@dataclass(frozen=True, slots=True)
class ImageEntry:
    uri: str
    command: tuple[str, ...] = ()
    python: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"uri": self.uri}
        if self.command:
            out["command"] = list(self.command)
        if self.python:
            out["python"] = self.python
        return out


def parse_images(text: str, source: str) -> tuple[ImageEntry, ...]:
    try:
        data: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping with an images list")
    unknown = sorted(set(data) - {"images"})
    if unknown:
        raise ConfigError(f"{source}: unknown top-level keys {unknown}; expected images")
    entries = data.get("images", [])
    entries = [] if entries is None else entries
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: images must be a list of entries")
    parsed = tuple(image_entry(raw, f"{source}: images[{i}]") for i, raw in enumerate(entries))
    seen: set[str] = set()
    for i, entry in enumerate(parsed):
        if entry.uri in seen:
            raise ConfigError(f"{source}: images[{i}].uri: {entry.uri!r} is mapped twice")
        seen.add(entry.uri)
    return parsed


def image_entry(raw: Any, where: str) -> ImageEntry:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: an entry is a mapping of {', '.join(_FIELDS)}")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown fields {unknown}; expected {', '.join(_FIELDS)}")
    uri = raw.get("uri")
    if not isinstance(uri, str) or _URI.fullmatch(uri) is None:
        raise ConfigError(f"{where}.uri: {uri!r} is not an image URI or repository name")
    command = raw.get("command") or []
    if not isinstance(command, list) or not all(isinstance(a, str) and a for a in command):
        raise ConfigError(f"{where}.command: a list of the program and its arguments, got {command!r}")
    python = raw.get("python")
    if python is not None and (not isinstance(python, str) or not os.path.isabs(python)):
        raise ConfigError(f"{where}.python: the absolute path of a Python interpreter, got {python!r}")
    if not command and python is None:
        raise ConfigError(f"{where}: give command (a program of your own) or python (an interpreter for scripts)")
    return ImageEntry(uri, tuple(command), python)


def load_images_file(path: str | os.PathLike[str]) -> tuple[ImageEntry, ...]:
    """The file's entries; none when it does not exist."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise ConfigError(f"cannot read images file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read images file {p}: not UTF-8 text") from None
    return parse_images(text, str(p))


def save_images_file(path: str | os.PathLike[str], entries: tuple[ImageEntry, ...]) -> None:
    """Write the file whole (a temporary file renamed over it: a reader never sees half of it)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(yaml.safe_dump({"images": [e.as_dict() for e in entries]}, sort_keys=False))
    os.replace(tmp, p)
