"""sagemaker_submit_directory inside a channel (the SDK's network-isolation path) maps to the channel's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.services.training.job_files import copy_into, in_channel
from servekit.services.training.sandbox import Layout, command


def test_a_path_in_a_channel_is_the_channels_folder_on_this_machine(tmp_path: Path) -> None:
    channels = {"code": tmp_path / "channels" / "code"}
    assert in_channel("/opt/ml/input/data/code/sourcedir.tar.gz", channels) == channels["code"] / "sourcedir.tar.gz"
    assert in_channel("/opt/ml/input/data/code", channels) == channels["code"]
    assert in_channel("s3://bucket/code/sourcedir.tar.gz", channels) is None
    with pytest.raises(ValueError, match="no channel 'train'"):
        in_channel("/opt/ml/input/data/train/x.tar.gz", channels)
    with pytest.raises(ValueError, match="inside the channel"):
        in_channel("/opt/ml/input/data/code/../../../etc/passwd", channels)


def test_copy_into_takes_files_and_folders_but_no_link(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.tar.gz").write_bytes(b"x")
    copy_into(tmp_path / "src" / "a.tar.gz", tmp_path / "one")
    copy_into(tmp_path / "src", tmp_path / "all")
    assert (tmp_path / "one" / "a.tar.gz").read_bytes() == (tmp_path / "all" / "a.tar.gz").read_bytes() == b"x"
    (tmp_path / "link").symlink_to(tmp_path / "src" / "a.tar.gz")
    with pytest.raises(ValueError, match="is a link"):
        copy_into(tmp_path / "link", tmp_path / "two")


def test_an_isolated_sandbox_has_a_network_of_its_own(tmp_path: Path) -> None:
    assert "--unshare-net" in command(Layout(tmp_path, network=False), ["true"])
    assert "--unshare-net" not in command(Layout(tmp_path), ["true"])
