"""FolderSync: restored as copies, only changed files uploaded, the first host's file where names meet."""

from __future__ import annotations

from pathlib import Path

from servekit.services.training.folder_sync import FolderSync


class Bucket:
    """Objects by URI, in memory, behind the two calls the sync makes."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts: list[str] = []

    def fetch(self, uri: str, dest: Path) -> int:
        found = {k: v for k, v in self.objects.items() if k.startswith(uri)}
        if not found:
            raise FileNotFoundError(uri)
        for key, data in found.items():
            target = dest / key[len(uri) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return len(found)

    def put_file(self, uri: str, path: Path, content_type: str = "") -> str:
        self.objects[uri] = path.read_bytes()
        self.puts.append(uri)
        return uri


def test_restore_sync_and_the_first_hosts_file(tmp_path: Path) -> None:
    bucket = Bucket()
    hosts = [tmp_path / "a" / "checkpoints", tmp_path / "b" / "checkpoints"]
    for h in hosts:
        h.mkdir(parents=True)
    sync = FolderSync(bucket, "s3://b/ck/", hosts)
    assert sync.restore() == 0  # a first run: nothing there
    (hosts[0] / "model.pt").write_bytes(b"a1")
    (hosts[1] / "model.pt").write_bytes(b"b1")
    (hosts[1] / "sub").mkdir()
    (hosts[1] / "sub" / "rank1.pt").write_bytes(b"r1")
    assert sync.sync() == 2
    assert bucket.objects == {"s3://b/ck/model.pt": b"a1", "s3://b/ck/sub/rank1.pt": b"r1"}
    assert sync.sync() == 0  # nothing changed: nothing sent
    (hosts[0] / "model.pt").write_bytes(b"a2-longer")
    assert sync.sync() == 1 and bucket.objects["s3://b/ck/model.pt"] == b"a2-longer"

    again = [tmp_path / "c" / "checkpoints"]
    again[0].mkdir(parents=True)
    resumed = FolderSync(bucket, "s3://b/ck", again)
    assert resumed.restore() == 2
    assert (again[0] / "model.pt").read_bytes() == b"a2-longer"
    assert resumed.sync() == 0  # what was restored is not sent back
