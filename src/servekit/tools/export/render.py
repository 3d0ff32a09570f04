"""Manifests as YAML: one multi-document stream, keys in the order they were built (as people write them),
multi-line strings as literal blocks, and no anchors (a value used twice is written twice, as kubectl shows it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def to_yaml(documents: Iterable[dict[str, Any]]) -> str:
    return yaml.dump_all(
        list(documents), Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True, width=120
    )
