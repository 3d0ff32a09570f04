import servekit


def test_exported_members() -> None:
    for name in servekit.__all__:
        assert hasattr(servekit, name), name
    assert sorted(servekit.__all__) == servekit.__all__
