import pytest

from servekit.errors import IllegalTransition
from servekit.serving.state import ServableState as S
from servekit.serving.state import check_transition

LEGAL = [
    (S.NEW, S.LOADING),
    (S.NEW, S.END),
    (S.LOADING, S.AVAILABLE),
    (S.LOADING, S.END),
    (S.AVAILABLE, S.UNLOADING),
    (S.UNLOADING, S.END),
    (S.ERROR, S.END),
    (S.NEW, S.ERROR),
    (S.LOADING, S.ERROR),
    (S.AVAILABLE, S.ERROR),
    (S.UNLOADING, S.ERROR),
]
ILLEGAL = [
    (S.NEW, S.AVAILABLE),
    (S.NEW, S.UNLOADING),
    (S.LOADING, S.UNLOADING),
    (S.AVAILABLE, S.LOADING),
    (S.AVAILABLE, S.END),
    (S.UNLOADING, S.AVAILABLE),
    (S.END, S.LOADING),
    (S.END, S.ERROR),
    (S.ERROR, S.AVAILABLE),
    (S.ERROR, S.LOADING),
    (S.ERROR, S.ERROR),
]


@pytest.mark.parametrize(("old", "new"), LEGAL)
def test_legal(old: S, new: S) -> None:
    check_transition(old, new)


@pytest.mark.parametrize(("old", "new"), ILLEGAL)
def test_illegal(old: S, new: S) -> None:
    with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
        check_transition(old, new)


def test_every_pair_is_classified() -> None:
    assert len(LEGAL) + len(ILLEGAL) <= len(S) ** 2
    assert not set(LEGAL) & set(ILLEGAL)


def test_tf_names() -> None:
    assert S.NEW.tf_name == "START"
    assert S.ERROR.tf_name == "END"
    assert S.AVAILABLE.tf_name == "AVAILABLE"
