"""Job inputs: a manifest's shape checked with the reason, its objects fetched at their relative paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.services.training.inputs import InputError, fetch_input, manifest_keys


class Store:
    """Objects by URI behind the one call inputs make (fetch: an object keeps its base name, a prefix its paths)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def fetch(self, uri: str, dest: Path) -> int:
        dest.mkdir(parents=True, exist_ok=True)
        if uri in self.objects:
            (dest / uri.rsplit("/", 1)[1]).write_bytes(self.objects[uri])
            return 1
        found = {k: v for k, v in self.objects.items() if k.startswith(uri.rstrip("/") + "/")}
        if not found:
            raise FileNotFoundError(f"{uri}: no such object or prefix")
        for key, data in found.items():
            target = dest / key[len(uri.rstrip("/")) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return len(found)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{", "is not JSON"),
        ("[]", "must be a JSON list"),
        ('["a"]', "must be a JSON list"),
        ('[{"prefix": "/local/"}, "a"]', "its prefix must be an s3:// URI"),
        ('[{"prefix": "s3://b/p/"}]', "lists no objects"),
        ('[{"prefix": "s3://b/p/"}, "../x"]', "entry 1 must be a relative key"),
        ('[{"prefix": "s3://b/p/"}, "a", 3]', "entry 2 must be a relative key"),
    ],
)
def test_a_bad_manifest_says_what_is_wrong(doc: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        manifest_keys(doc, "s3://b/m.json")


def test_a_manifest_fetches_what_it_lists(tmp_path: Path) -> None:
    store = Store(
        {
            "s3://b/data/a.csv": b"a",
            "s3://b/data/sub/b.csv": b"b",
            "s3://b/data/unlisted.csv": b"no",
            "s3://b/m.json": json.dumps([{"prefix": "s3://b/data/"}, "a.csv", "sub/b.csv"]).encode(),
        }
    )
    dest = tmp_path / "channel"
    assert fetch_input(store, {"S3Uri": "s3://b/m.json", "S3DataType": "ManifestFile"}, dest) == 2
    got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert got == ["a.csv", "sub/b.csv"]
    assert fetch_input(store, {"S3Uri": "s3://b/data"}, tmp_path / "prefix") == 3  # S3Prefix by default
    with pytest.raises(InputError, match="one manifest object, not a prefix"):
        fetch_input(store, {"S3Uri": "s3://b/data", "S3DataType": "ManifestFile"}, tmp_path / "x")
    with pytest.raises(InputError, match="AugmentedManifestFile is not supported"):
        fetch_input(store, {"S3Uri": "s3://b/m.json", "S3DataType": "AugmentedManifestFile"}, tmp_path / "y")
