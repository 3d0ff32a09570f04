"""SageMaker's name rules (endpoints, endpoint configs and variants share one; models have their own) and ARNs."""

from __future__ import annotations

import re

import pytest

from servekit.aws.names import (
    Account,
    InvalidName,
    ResourceKind,
    check_endpoint_config_name,
    check_endpoint_name,
    check_model_name,
    check_name,
    check_variant_name,
    parse_arn,
)

GOOD_ENDPOINT = ["a", "A1", "my-endpoint", "a--b", "a" * 63, "x" + "-a" * 31, "0"]
BAD_ENDPOINT = [
    "",
    "-a",
    "a-",
    "a_b",
    "a.b",
    "a b",
    "a/b",
    "../etc",
    "a\n",
    "é",
    "a" * 64,
    "a" + "-" * 62 + "b",  # 64 characters: the pattern alone would allow it, the length does not
]
GOOD_MODEL = ["m", "m-1", "M--1", "a" * 63]
BAD_MODEL = ["", "-m", "m-", "m_1", "m.1", "a" * 64, "m\n", "m\x00"]


@pytest.mark.parametrize("name", GOOD_ENDPOINT)
def test_good_endpoint_config_and_variant_names(name: str) -> None:
    assert check_endpoint_name(name) == name
    assert check_endpoint_config_name(name) == name
    assert check_variant_name(name) == name


@pytest.mark.parametrize("name", BAD_ENDPOINT)
def test_bad_endpoint_names(name: str) -> None:
    for check in (check_endpoint_name, check_endpoint_config_name, check_variant_name):
        with pytest.raises(InvalidName, match="1 validation error detected"):
            check(name)


@pytest.mark.parametrize("name", GOOD_MODEL)
def test_good_model_names(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", BAD_MODEL)
def test_bad_model_names(name: str) -> None:
    with pytest.raises(InvalidName):
        check_model_name(name)


def test_messages_use_the_services_wording_and_name_the_field() -> None:
    with pytest.raises(InvalidName) as caught:
        check_endpoint_name("bad_name")
    assert caught.value.message == (
        "1 validation error detected: Value 'bad_name' at 'endpointName' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
    )
    assert (caught.value.field, caught.value.value) == ("endpointName", "bad_name")
    with pytest.raises(InvalidName, match="length less than or equal to 63"):
        check_model_name("m" * 64)
    with pytest.raises(InvalidName, match=re.escape("at 'productionVariants.1.member.variantName'")):
        check_variant_name("a_b", "productionVariants.1.member.variantName")
    with pytest.raises(InvalidName, match="must be a string"):
        check_endpoint_name(None)


def test_a_long_hostile_name_is_refused_at_once() -> None:
    with pytest.raises(InvalidName, match="length"):
        check_endpoint_name("a" + "-" * 100_000 + "!")


def test_check_name_by_kind() -> None:
    assert check_name(ResourceKind.ENDPOINT, "a--b") == "a--b"
    assert check_name(ResourceKind.MODEL, "a--b") == "a--b"
    with pytest.raises(InvalidName, match="at 'modelName'"):
        check_name(ResourceKind.MODEL, "m-")
    with pytest.raises(InvalidName, match="at 'endpointConfigName'"):
        check_name(ResourceKind.ENDPOINT_CONFIG, "c-")


def test_arns_lowercase_the_name() -> None:
    account = Account()
    assert account.arn(ResourceKind.ENDPOINT, "My-Endpoint") == (
        "arn:aws:sagemaker:us-east-1:000000000000:endpoint/my-endpoint"
    )
    assert Account("123456789012", "eu-west-2").arn(ResourceKind.ENDPOINT_CONFIG, "Cfg") == (
        "arn:aws:sagemaker:eu-west-2:123456789012:endpoint-config/cfg"
    )
    assert account.arn(ResourceKind.MODEL, "M1").endswith(":model/m1")
    with pytest.raises(InvalidName):
        account.arn(ResourceKind.ENDPOINT, "no_underscores")


@pytest.mark.parametrize(
    ("account_id", "region"), [("1234", "us-east-1"), ("12345678901a", "us-east-1"), ("000000000000", "US_EAST")]
)
def test_a_bad_account_or_region_is_refused(account_id: str, region: str) -> None:
    with pytest.raises(ValueError):
        Account(account_id, region)


def test_parse_arn_round_trips_and_refuses_others() -> None:
    account = Account()
    for kind in ResourceKind:
        assert parse_arn(account.arn(kind, "Some-Name")) == (kind, "some-name")
    for bad in [
        "arn:aws:sagemaker:us-east-1:000000000000:transform-job/x",  # not a hosting kind
        "arn:aws:s3:::bucket",
        "arn:aws:sagemaker:us-east-1:0000:endpoint/x",
        "arn:aws:sagemaker:us-east-1:000000000000:endpoint/x_y",
        "arn:aws:sagemaker:us-east-1:000000000000:endpoint/a/b",
        "endpoint/x",
    ]:
        with pytest.raises(InvalidName):
            parse_arn(bad)
