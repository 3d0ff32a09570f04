import itertools

import pytest

from servekit.errors import IllegalTransition
from servekit.serving.lifecycle import ServableState as S
from servekit.serving.lifecycle import check_transition

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
    (S.NEW, S.NEW),
    (S.NEW, S.AVAILABLE),
    (S.NEW, S.UNLOADING),
    (S.LOADING, S.NEW),
    (S.LOADING, S.LOADING),
    (S.LOADING, S.UNLOADING),
    (S.AVAILABLE, S.NEW),
    (S.AVAILABLE, S.LOADING),
    (S.AVAILABLE, S.AVAILABLE),
    (S.AVAILABLE, S.END),
    (S.UNLOADING, S.NEW),
    (S.UNLOADING, S.LOADING),
    (S.UNLOADING, S.AVAILABLE),
    (S.UNLOADING, S.UNLOADING),
    (S.END, S.NEW),
    (S.END, S.LOADING),
    (S.END, S.AVAILABLE),
    (S.END, S.UNLOADING),
    (S.END, S.END),
    (S.END, S.ERROR),
    (S.ERROR, S.NEW),
    (S.ERROR, S.LOADING),
    (S.ERROR, S.AVAILABLE),
    (S.ERROR, S.UNLOADING),
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
    """Each of the len(S)**2 pairs is in exactly one list, so a new state or edge cannot go untested."""
    every_pair = set(itertools.product(S, S))
    legal, illegal = set(LEGAL), set(ILLEGAL)
    assert len(legal) == len(LEGAL) and len(illegal) == len(ILLEGAL), "a pair is listed twice"
    assert not legal & illegal, (
        f"pairs both legal and illegal: {sorted((a.value, b.value) for a, b in legal & illegal)}"
    )
    missing = every_pair - legal - illegal
    assert not missing, f"pairs not classified: {sorted((a.value, b.value) for a, b in missing)}"


def test_tf_names() -> None:
    assert S.NEW.tf_name == "START"
    assert S.ERROR.tf_name == "END"
    assert S.AVAILABLE.tf_name == "AVAILABLE"
