import servekit


def test_exported_members() -> None:
    for name in servekit.__all__:
        assert hasattr(servekit, name), name
    assert sorted(servekit.__all__) == servekit.__all__


def test_the_version_is_written_in_one_place() -> None:
    """pyproject reads the version from ``servekit/_version.py`` (hatch), so the two can never disagree."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    source = root / pyproject["tool"]["hatch"]["version"]["path"]
    assert source == Path(servekit.__file__).parent / "_version.py"
    assert re.fullmatch(r'__version__ = "(\d+\.\d+\.\d+)"\n', source.read_text())
    assert servekit.__version__ in source.read_text()
