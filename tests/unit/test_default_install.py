"""What the default install (``pip install servekit``, no extras) must read and write (issue 46, item 5): s3://, so
a CreateTransformJob on the plane's own bucket, model data on S3 and monitoring outputs work without an extra."""

from __future__ import annotations

import tomllib
from pathlib import Path

import fsspec

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_s3_is_read_by_the_default_install() -> None:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("s3fs>=") for d in deps), deps
    assert fsspec.get_filesystem_class("s3").__module__.startswith("s3fs")
