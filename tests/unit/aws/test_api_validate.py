"""Input validation edge cases on a small model of our own (the same code paths real models take)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.model import ServiceModel, StructureShape

from servekit.aws import ApiError
from servekit.aws.models import service
from servekit.aws.validate import parse_input

SHAPES: dict[str, Any] = {
    "Input": {
        "type": "structure",
        "required": ["Name", "Items"],
        "members": {
            "Name": {"shape": "Name"},
            "Count": {"shape": "Count"},
            "Big": {"shape": "Big"},
            "Weight": {"shape": "Weight"},
            "Flag": {"shape": "Flag"},
            "When": {"shape": "When"},
            "Data": {"shape": "Data"},
            "Sort": {"shape": "Sort"},
            "Items": {"shape": "Items"},
            "Env": {"shape": "Env"},
            "Nested": {"shape": "NestedMap"},
            "Secret": {"shape": "Secret"},
            "Weird": {"shape": "Weird"},
            "Choice": {"shape": "Choice"},
        },
    },
    "Name": {"type": "string", "min": 1, "max": 8, "pattern": "^[a-z](-*[a-z0-9])*"},
    "Count": {"type": "integer", "min": 1, "max": 10},
    "Big": {"type": "long"},
    "Weight": {"type": "float", "min": 0},
    "Flag": {"type": "boolean"},
    "When": {"type": "timestamp"},
    "Data": {"type": "blob", "max": 4},
    "Sort": {"type": "string", "enum": ["Ascending", "Descending"]},
    "Items": {"type": "list", "member": {"shape": "Item"}, "min": 1, "max": 2},
    "Item": {
        "type": "structure",
        "required": ["Key"],
        "members": {"Key": {"shape": "Name"}, "Count": {"shape": "Count"}},
    },
    "Env": {"type": "map", "key": {"shape": "EnvKey"}, "value": {"shape": "EnvValue"}, "max": 3},
    "EnvKey": {"type": "string", "max": 4, "pattern": "[A-Z_]+"},
    "EnvValue": {"type": "string", "max": 3},
    "NestedMap": {"type": "map", "key": {"shape": "EnvKey"}, "value": {"shape": "Item"}},
    "Secret": {"type": "string", "max": 2, "sensitive": True},
    "Weird": {"type": "string", "pattern": "\\p{NoSuchClass}+"},
    "Choice": {"type": "structure", "union": True, "members": {"A": {"shape": "Flag"}, "B": {"shape": "Flag"}}},
}
MODEL = ServiceModel(
    {
        "metadata": {"protocol": "json", "jsonVersion": "1.1", "targetPrefix": "T", "serviceId": "T"},
        "operations": {
            "Op": {"name": "Op", "http": {"method": "POST", "requestUri": "/"}, "input": {"shape": "Input"}}
        },
        "shapes": SHAPES,
    }
)
INPUT: StructureShape = MODEL.operation_model("Op").input_shape
OK = {"Name": "ab-c", "Items": [{"Key": "k"}]}


def check(data: dict[str, Any]) -> dict[str, Any]:
    return parse_input(INPUT, data)


def message(data: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as e:
        check(data)
    assert (e.value.code, e.value.status) == ("ValidationException", 400)
    return e.value.message


def serialization(data: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as e:
        check(data)
    assert e.value.code == "SerializationException"
    return e.value.message


def test_valid_input_is_converted_and_unknown_members_dropped() -> None:
    out = check({
        **OK, "Count": 3.0, "Big": 2**40, "Weight": 1, "Flag": False, "When": 1704067200, "Data": "AAEC",
        "Sort": "Ascending", "Env": {"A_B": "x"}, "Unknown": {"anything": 1}, "Choice": {"A": True},
    })  # fmt: skip
    assert out == {
        "Name": "ab-c", "Items": [{"Key": "k"}], "Count": 3, "Big": 2**40, "Weight": 1.0, "Flag": False,
        "When": datetime(2024, 1, 1, tzinfo=UTC), "Data": b"\x00\x01\x02", "Sort": "Ascending", "Env": {"A_B": "x"},
        "Choice": {"A": True},
    }  # fmt: skip
    assert isinstance(out["Count"], int) and isinstance(out["Weight"], float)


@pytest.mark.parametrize("when", ["2024-01-01T00:00:00Z", "2024-01-01T00:00:00+00:00", "1704067200", 1704067200.0])
def test_timestamps_as_epoch_or_iso(when: object) -> None:
    assert check({**OK, "When": when})["When"] == datetime(2024, 1, 1, tzinfo=UTC)


def test_required_members_are_reported_as_null() -> None:
    assert message({}) == (
        "2 validation errors detected: Value null at 'name' failed to satisfy constraint: Member must not be null; "
        "Value null at 'items' failed to satisfy constraint: Member must not be null"
    )
    assert message({**OK, "Items": [{"Count": 1}]}) == (
        "1 validation error detected: Value null at 'items.1.member.key' failed to satisfy constraint: "
        "Member must not be null"
    )


def test_lengths_values_enums_patterns() -> None:
    assert message({**OK, "Name": "abcdefghi"}) == (
        "1 validation error detected: Value 'abcdefghi' at 'name' failed to satisfy constraint: "
        "Member must have length less than or equal to 8"
    )
    assert message({**OK, "Name": ""}).endswith(
        "Member must have length greater than or equal to 1; Value '' at 'name' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: ^[a-z](-*[a-z0-9])*"
    )
    # the whole value must match (Java's matches()), not just a prefix
    assert "Member must satisfy regular expression pattern" in message({**OK, "Name": "ab c"})
    assert message({**OK, "Count": 11}).endswith("Value '11' at 'count' failed to satisfy constraint: Member must "
        "have value less than or equal to 10")  # fmt: skip
    assert message({**OK, "Count": 0}).endswith("Member must have value greater than or equal to 1")
    assert message({**OK, "Weight": -0.5}).endswith("Value '-0.5' at 'weight' failed to satisfy constraint: Member "
        "must have value greater than or equal to 0")  # fmt: skip
    assert message({**OK, "Sort": "Up"}).endswith(
        "Value 'Up' at 'sort' failed to satisfy constraint: Member must satisfy enum value set: [Ascending, Descending]"
    )
    assert message({**OK, "Data": "AAECAwQ="}).endswith("Member must have length less than or equal to 4")
    assert message({**OK, "Items": []}).endswith("Value '[]' at 'items' failed to satisfy constraint: Member must "
        "have length greater than or equal to 1")  # fmt: skip
    assert message({**OK, "Items": [{"Key": "a"}] * 3}).endswith("Member must have length less than or equal to 2")


def test_errors_in_nested_lists_are_all_reported_in_order() -> None:
    msg = message({"Name": "ok", "Items": [{"Key": "a", "Count": 99}, {"Key": "B"}]})
    assert msg == (
        "2 validation errors detected: Value '99' at 'items.1.member.count' failed to satisfy constraint: "
        "Member must have value less than or equal to 10; Value 'B' at 'items.2.member.key' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: ^[a-z](-*[a-z0-9])*"
    )


def test_maps_report_key_and_value_constraints_on_the_map() -> None:
    msg = message({**OK, "Env": {"lower": "long-value"}})
    assert msg == (
        "2 validation errors detected: Value '{lower=long-value}' at 'env' failed to satisfy constraint: Map keys "
        "must satisfy constraint: [Member must have length less than or equal to 4, Member must satisfy regular "
        "expression pattern: [A-Z_]+]; Value '{lower=long-value}' at 'env' failed to satisfy constraint: Map value "
        "must satisfy constraint: [Member must have length less than or equal to 3]"
    )
    assert message({**OK, "Env": {"A": "1", "B": "2", "C": "3", "D": "4"}}).endswith(
        "Member must have length less than or equal to 3"
    )
    assert message({**OK, "Nested": {"K": {"Key": "X"}}}).startswith(
        "1 validation error detected: Value 'X' at 'nested.K.key' failed to satisfy constraint"
    )


def test_sensitive_values_stay_out_of_messages() -> None:
    assert message({**OK, "Secret": "hunter2"}) == (
        "1 validation error detected: Value at 'secret' failed to satisfy constraint: Member must have length less "
        "than or equal to 2"
    )


def test_a_pattern_python_cannot_compile_is_skipped() -> None:
    assert check({**OK, "Weird": "anything at all"})["Weird"] == "anything at all"


def test_a_union_takes_one_member() -> None:
    assert "Union must have exactly one member set" in message({**OK, "Choice": {"A": True, "B": False}})


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"Name": 5}, "NUMBER_VALUE can not be converted to a String (at 'name')"),
        ({"Count": "5"}, "STRING_VALUE can not be converted to an Integer (at 'count')"),
        ({"Count": True}, "BOOLEAN_VALUE can not be converted to an Integer"),
        ({"Count": 1.5}, "1.5 is not an integer (at 'count')"),
        ({"Count": 2**31}, "out of range for an Integer"),
        ({"Weight": "1"}, "STRING_VALUE can not be converted to a Float"),
        ({"Flag": "true"}, "STRING_VALUE can not be converted to a Boolean"),
        ({"When": "yesterday"}, "STRING_VALUE can not be converted to a Timestamp"),
        ({"When": True}, "BOOLEAN_VALUE can not be converted to a Timestamp"),
        ({"Data": "not base64!"}, "Value at 'data' is not valid base64"),
        ({"Items": {"Key": "a"}}, "START_OBJECT can not be converted to a List (at 'items')"),
        ({"Items": [["a"]]}, "START_ARRAY can not be converted to a Structure (at 'items.1.member')"),
        ({"Env": ["A"]}, "START_ARRAY can not be converted to a Map"),
        ({"Env": {"A": 1}}, "NUMBER_VALUE can not be converted to a String (at 'env.A')"),
    ],
)
def test_wrong_json_types_are_serialization_errors(data: dict[str, Any], fragment: str) -> None:
    assert fragment in serialization({**OK, **data})


def test_null_members_count_as_absent() -> None:
    assert check({**OK, "Count": None}) == OK


def test_every_pattern_in_the_hosting_models_compiles() -> None:
    from servekit.aws.patterns import compile_pattern

    failed = []
    for name in ("sagemaker", "sagemaker-runtime", "application-autoscaling", "cloudwatch"):
        for shape in service(name).model.shape_names:
            pattern = service(name).model.shape_for(shape).metadata.get("pattern")
            if pattern is not None and compile_pattern(pattern) is None:
                failed.append(pattern)
    assert failed == []


def test_real_model_name_rules() -> None:
    create = service("sagemaker").operation("CreateEndpoint")
    assert create is not None
    ok = parse_input(create.input_shape, {"EndpointName": "a-b--c9", "EndpointConfigName": "c"})
    assert ok == {"EndpointName": "a-b--c9", "EndpointConfigName": "c"}
    for bad in ("-a", "a-", "a_b", "a b", "x" * 64, "../etc"):
        with pytest.raises(ApiError) as e:
            parse_input(create.input_shape, {"EndpointName": bad, "EndpointConfigName": "c"})
        assert f"Value '{bad}' at 'endpointName' failed to satisfy constraint" in e.value.message
