#!/usr/bin/env python3
"""Summarise a py-spy speedscope profile: per thread, the share of samples spent in each function (inclusive,
then self), so the results file can say where a request's time goes. ``python benchmarks/profile_summary.py
PROFILE.speedscope.json [--top 25]``."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def summarise(path: Path, top: int) -> str:
    doc = json.loads(path.read_text())
    frames = doc["shared"]["frames"]

    def label(i: int) -> str:
        f = frames[i]
        file = (f.get("file") or "").rsplit("site-packages/", 1)[-1].rsplit("/src/", 1)[-1]
        return f"{f['name']} ({file}:{f.get('line', '')})"

    out = []
    for prof in doc["profiles"]:
        samples, weights = prof["samples"], prof["weights"]
        total = sum(weights)
        if not total:
            continue
        incl: Counter[str] = Counter()
        self_: Counter[str] = Counter()
        for stack, w in zip(samples, weights, strict=True):
            if stack:
                self_[label(stack[-1])] += w
            for name in {label(i) for i in stack}:
                incl[name] += w
        out.append(f"## {prof['name']} ({total} samples)")
        out.append("inclusive:")
        out += [f"  {100 * w / total:5.1f}%  {n}" for n, w in incl.most_common(top)]
        out.append("self:")
        out += [f"  {100 * w / total:5.1f}%  {n}" for n, w in self_.most_common(top)]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    print(summarise(a.profile, a.top))


if __name__ == "__main__":
    main()
