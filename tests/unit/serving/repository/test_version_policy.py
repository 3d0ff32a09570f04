import pytest

from servekit.config.models import VersionPolicy
from servekit.errors import ConfigError
from servekit.serving.repository.version_policy import aspired_versions

CASES = [
    # (policy, on storage, aspired)
    (VersionPolicy(), [], set()),
    (VersionPolicy(), [1], {1}),
    (VersionPolicy(), [1, 2, 3], {3}),
    (VersionPolicy(), [3, 1, 2], {3}),
    (VersionPolicy("latest", num_versions=2), [1, 2, 3], {2, 3}),
    (VersionPolicy("latest", num_versions=5), [1, 2], {1, 2}),
    (VersionPolicy("all"), [], set()),
    (VersionPolicy("all"), [4, 1, 9], {1, 4, 9}),
    (VersionPolicy("specific", versions=frozenset({1, 3})), [1, 2, 3], {1, 3}),
    (VersionPolicy("specific", versions=frozenset({7})), [1, 2, 3], set()),
    (VersionPolicy("specific", versions=frozenset({2, 7})), [1, 2, 3], {2}),
]


@pytest.mark.parametrize(("policy", "present", "expected"), CASES)
def test_aspired_versions(policy: VersionPolicy, present: list[int], expected: set[int]) -> None:
    assert aspired_versions(policy, present) == expected


def test_latest_needs_positive_count() -> None:
    with pytest.raises(ConfigError, match="num_versions"):
        VersionPolicy("latest", num_versions=0)


def test_specific_needs_versions() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        VersionPolicy("specific")


def test_describe() -> None:
    assert VersionPolicy().describe() == "latest{1}"
    assert VersionPolicy("specific", versions=frozenset({3, 1})).describe() == "specific{1,3}"
