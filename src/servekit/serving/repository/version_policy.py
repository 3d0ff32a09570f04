"""Which of the versions on storage a model should serve. Pure: a table test covers every policy."""

from __future__ import annotations

from collections.abc import Iterable

from servekit.config.models import VersionPolicy


def aspired_versions(policy: VersionPolicy, available: Iterable[int]) -> frozenset[int]:
    present = sorted(set(available))
    if policy.kind == "latest":
        return frozenset(present[-policy.num_versions :]) if present else frozenset()
    if policy.kind == "all":
        return frozenset(present)
    return frozenset(v for v in present if v in policy.versions)
