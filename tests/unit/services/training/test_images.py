"""The images table: the user's file (validated, with errors that name the entry and field), exact URIs before
repository names, framework versions from tags, and the framework check against an interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servekit.config.images import ImageEntry, load_images_file, parse_images, save_images_file
from servekit.errors import ConfigError
from servekit.services.training.images import Image, ImageTable, framework_check, installed_version, tag_version

SK = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
OWN = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-algo:latest"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("images: {}", "images must be a list"),
        ("other: []", "unknown top-level keys ['other']"),
        ("images:\n  - uri: x\n", "images[0]: give command (a program of your own) or python"),
        ("images:\n  - uri: x\n    command: python3 train.py\n", "images[0].command: a list of the program"),
        ("images:\n  - uri: x\n    python: bin/python\n", "images[0].python: the absolute path"),
        ("images:\n  - uri: 'a b'\n    python: /p\n", "images[0].uri: 'a b' is not an image URI"),
        ("images:\n  - {uri: x, python: /p}\n  - {uri: x, python: /q}\n", "images[1].uri: 'x' is mapped twice"),
        ("images:\n  - {uri: x, python: /p, extra: 1}\n", "unknown fields ['extra']"),
    ],
)
def test_a_malformed_file_names_the_entry_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_images(text, "images.yaml")
    assert message in str(err.value) and str(err.value).startswith("images.yaml: ")


def test_entries_round_trip_and_resolve_exact_before_repository(tmp_path: Path) -> None:
    path = tmp_path / "images.yaml"
    assert load_images_file(path) == ()  # no file: nothing mapped
    save_images_file(
        path,
        (
            ImageEntry("my-algo", ("python3", "/srv/train.py")),
            ImageEntry(OWN, ("python3", "/srv/exact.py", "train")),
            ImageEntry("sagemaker-scikit-learn", python="/opt/sk/bin/python"),
        ),
    )
    table = ImageTable([path])
    assert table.resolve(OWN) == Image(OWN, None, ("python3", "/srv/exact.py", "train"))
    other = OWN.replace(":latest", ":v2")
    assert table.resolve(other) == Image(other, None, ("python3", "/srv/train.py"))
    assert table.resolve(SK) == Image(SK, "scikit-learn", (), "/opt/sk/bin/python")
    assert table.resolve("pytorch-training:2.1-cpu-py310") == Image("pytorch-training:2.1-cpu-py310", "pytorch")
    assert table.resolve("123456789012.dkr.ecr.us-east-1.amazonaws.com/unknown:1") is None
    later = tmp_path / "more.yaml"
    save_images_file(later, (ImageEntry("my-algo", ("python3", "/srv/v2.py")),))
    assert ImageTable([path, later]).resolve(other) == Image(other, None, ("python3", "/srv/v2.py"))


@pytest.mark.parametrize(
    ("image", "version"),
    [
        (SK, "1.2"),
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-cpu-py310", "2.1"),
        ("257758044811.dkr.ecr.us-east-2.amazonaws.com/sagemaker-xgboost:1.7-1", "1.7"),
        ("localhost:5000/sagemaker-xgboost", None),
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training@sha256:abc", None),
        ("x/pytorch-training:latest", None),
    ],
)
def test_the_framework_version_a_tag_names(image: str, version: str | None) -> None:
    assert tag_version(image) == version


def test_the_framework_check_against_an_interpreter(tmp_path: Path) -> None:
    import sklearn

    assert installed_version(sys.executable, "sklearn", "scikit-learn") == sklearn.__version__
    assert installed_version(sys.executable, "no_such_module_here", "no-such-dist") is None
    mine = sklearn.__version__.rsplit(".", 1)[0]
    same = Image(f"sagemaker-scikit-learn:{mine}-1-cpu-py3", "scikit-learn")
    assert framework_check(same, sys.executable) == (None, None)
    older = Image("sagemaker-scikit-learn:0.20-1-cpu-py3", "scikit-learn")
    error, warning = framework_check(older, sys.executable)
    assert error is None and warning is not None
    assert f"is scikit-learn 0.20; the job runs with scikit-learn {sklearn.__version__}" in warning
    bare = tmp_path / "python"  # an interpreter with nothing installed: it prints no version
    bare.write_text("#!/bin/sh\nexit 0\n")
    bare.chmod(0o755)
    error, warning = framework_check(older, str(bare))
    assert warning is None and error is not None
    assert f"{bare} has no scikit-learn installed: install it (pip install scikit-learn)" in error
    assert "servekit images add sagemaker-scikit-learn --python /path/to/python" in error
    assert framework_check(Image(OWN, None, ("prog",)), str(bare)) == (None, None)  # own images: no check


def test_model_monitors_analyzer_runs_servekits_baseline_unless_the_user_maps_it(tmp_path: Path) -> None:
    analyzer = "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer"
    command = ("python3", "-u", "-m", "servekit.services.monitoring.baseline.analyzer")
    table = ImageTable([tmp_path / "images.yaml"])
    for uri in (analyzer, analyzer.replace("us-east-1", "eu-west-1").replace("156813124566", "468650794304")):
        assert table.resolve(uri) == Image(uri, None, command)  # any account and region: the repository counts
    assert table.resolve(analyzer).own  # a processing job of it needs no ContainerEntrypoint
    save_images_file(tmp_path / "images.yaml", (ImageEntry("sagemaker-model-monitor-analyzer", ("python3", "/a.py")),))
    assert table.resolve(analyzer) == Image(analyzer, None, ("python3", "/a.py"))
