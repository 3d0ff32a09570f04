"""A job's files on this machine: its source archive unpacked, its outputs archived, a path in a channel found,
what its volume size means for its private /tmp."""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servekit.services.training import contract


def extract(archive: Path, dest: Path) -> None:
    """``archive``'s files into ``dest``, refusing absolute paths, ``..`` and links out of ``dest``."""
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")  # refuses absolute paths, .., links out of dest


def volume_bytes(resources: Mapping[str, Any]) -> int | None:
    """A job's ``VolumeSizeInGB`` in bytes: the size of its sandbox's private /tmp (None when not given)."""
    size = resources.get("VolumeSizeInGB")
    return int(size) * 2**30 if isinstance(size, int) and size > 0 else None


def in_channel(path: str, channels: Mapping[str, Path]) -> Path | None:
    """Where ``path``, a path in the sandbox under ``/opt/ml/input/data/<channel>/``, is on this machine (None for
    any other value, an ``s3://`` URI say); a path outside its channel's folder or into a channel the job does not
    have is a ValueError."""
    prefix = f"{contract.DATA}/"
    if not path.startswith(prefix):
        return None
    name, _, rest = path[len(prefix) :].partition("/")
    if name not in channels:
        raise ValueError(f"the job has no channel {name!r}")
    if any(part in ("", ".", "..") for part in rest.split("/")) and rest:
        raise ValueError("the path must name a file or folder inside the channel")
    return channels[name] / rest if rest else channels[name]


def copy_into(source: Path, folder: Path) -> None:
    """``source`` (a file, or a folder's files) into ``folder``, links not followed."""
    folder.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        raise ValueError(f"{source.name} is a link")
    if source.is_dir():
        shutil.copytree(source, folder, symlinks=True, dirs_exist_ok=True)
    elif source.is_file():
        shutil.copy2(source, folder / source.name, follow_symlinks=False)
    else:
        raise ValueError(f"{source.name} is not in the channel")


def tar_folders(folders: Sequence[Path], archive: Path) -> None:
    """The files of ``folders`` in one archive; where several hold the same path, the first one's."""
    seen: set[str] = set()
    with tarfile.open(archive, "w:gz") as tar:
        for folder in folders:
            for item in sorted(folder.rglob("*")):
                arcname = item.relative_to(folder).as_posix()
                if arcname in seen:
                    continue
                seen.add(arcname)
                tar.add(item, arcname=arcname, recursive=False)
