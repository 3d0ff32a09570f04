"""Folders of a job kept in step with an S3 prefix while it runs: a training job's checkpoints (``CheckpointConfig``:
``/opt/ml/checkpoints`` or its ``LocalPath`` and ``S3Uri``, as SageMaker does, so that a job started again after a
stop or a failure resumes from what the last one saved) and a processing job's ``Continuous`` outputs.

Before the job (checkpoints): the objects under the prefix are copied into each host's folder (copies, not the links
channels get: the script rewrites its checkpoints in place, and a link would rewrite the stored object too). While it
runs: every file whose size or modification time changed is uploaded each ``SYNC_S``. When it ends, whatever the
end: once more. Where hosts write the same name, the first host's file is the one kept."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

SYNC_S = 10.0


class SyncFiles(Protocol):
    def fetch(self, uri: str, dest: Path) -> int: ...

    def put_file(self, uri: str, path: Path, content_type: str = ...) -> str: ...


class FolderSync:
    def __init__(self, files: SyncFiles, uri: str, folders: Sequence[Path]) -> None:
        self.files = files
        self.uri = uri.rstrip("/")
        self.folders = list(folders)
        self._sent: dict[str, tuple[int, int]] = {}

    def restore(self) -> int:
        """Copy what ``S3Uri`` holds into every host's folder; how many files (0 for a first run)."""
        with tempfile.TemporaryDirectory(dir=self.folders[0].parent) as tmp:
            try:
                count = self.files.fetch(f"{self.uri}/", Path(tmp))
            except FileNotFoundError:
                return 0
            for folder in self.folders:
                shutil.copytree(tmp, folder, dirs_exist_ok=True)
        for path, rel in self._files():  # what came from S3 need not go back
            st = path.stat()
            self._sent[rel] = (st.st_size, st.st_mtime_ns)
        return count

    def _files(self) -> list[tuple[Path, str]]:
        seen: dict[str, Path] = {}
        for folder in self.folders:
            for path in sorted(folder.rglob("*")):
                rel = path.relative_to(folder).as_posix()
                if path.is_file() and not path.is_symlink() and rel not in seen:
                    seen[rel] = path
        return [(p, rel) for rel, p in seen.items()]

    def sync(self) -> int:
        """Upload every file changed since the last sync; how many."""
        sent = 0
        for path, rel in self._files():
            try:
                st = path.stat()
            except FileNotFoundError:  # removed by the script meanwhile
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            if self._sent.get(rel) == stamp:
                continue
            self.files.put_file(f"{self.uri}/{rel}", path, "application/octet-stream")
            self._sent[rel] = stamp
            sent += 1
        return sent

    async def keep_in_step(self, every_s: float = SYNC_S) -> None:
        """Sync every ``every_s`` until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            await asyncio.to_thread(self.sync)
