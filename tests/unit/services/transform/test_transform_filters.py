"""DataProcessing: the JSONPath subset and JoinSource, on the examples of SageMaker's documentation
("Associate Prediction Results with Input Records") and its API reference."""

from __future__ import annotations

from typing import Any

import pytest

from servekit.errors import ConfigError
from servekit.services.transform.filters import FilterError, apply, join_csv, join_json, parse_path
from servekit.services.transform.records import Shaper, dump_csv_row, input_filter, split_response
from servekit.services.transform.spec import AssembleWith, JoinSource, TransformSpec


def sel(path: str, value: Any) -> Any:
    return apply(parse_path(path), value)


def test_csv_example_drop_the_id_column_then_keep_id_and_prediction() -> None:
    # InputFilter "$[1:]", JoinSource Input, OutputFilter "$[0,-1]" on rows "id,features...".
    prepare = input_filter(parse_path("$[1:]"), "text/csv")
    assert prepare(b"1,5.1,3.5,1.4,0.2") == b"5.1,3.5,1.4,0.2"
    joined = join_csv(["1", "5.1", "3.5", "1.4", "0.2"], ["0.97"])
    assert joined == ["1", "5.1", "3.5", "1.4", "0.2", "0.97"]
    assert dump_csv_row(sel("$[0,-1]", joined)) == b"1,0.97"


def test_json_example_features_in_id_and_output_out() -> None:
    # InputFilter "$.features", JoinSource Input, OutputFilter "$['id','SageMakerOutput']".
    record = {"id": 7, "features": [5.1, 3.5, 1.4, 0.2]}
    prepare = input_filter(parse_path("$.features"), "application/jsonlines")
    assert prepare(b'{"id":7,"features":[5.1,3.5,1.4,0.2]}') == b"[5.1,3.5,1.4,0.2]"
    joined = join_json(record, {"label": 0})
    assert joined == {"id": 7, "features": [5.1, 3.5, 1.4, 0.2], "SageMakerOutput": {"label": 0}}
    assert sel("$['id','SageMakerOutput']", joined) == {"id": 7, "SageMakerOutput": {"label": 0}}


def test_joining_a_record_that_is_not_an_object() -> None:
    assert join_json([1, 2], 0.5) == {"SageMakerInput": [1, 2], "SageMakerOutput": 0.5}
    with pytest.raises(FilterError, match="reserved key"):
        join_json({"SageMakerOutput": 1}, 2)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("$", [1, 2], [1, 2]),
        ("$[0,5:]", list(range(8)), [0, 5, 6, 7]),  # the API reference's example
        ("$[-1]", [1, 2, 3], 3),
        ("$[1,-1]", [1, 2, 3], [2, 3]),
        ("$[:2]", [1, 2, 3], [1, 2]),
        ("$.a.b", {"a": {"b": 4}}, 4),
        ("$['a']['b']", {"a": {"b": 4}}, 4),
        ('$["a","c"]', {"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}),
        ("$.*", {"a": 1, "b": 2}, [1, 2]),
        ("$[*]", [1, 2], [1, 2]),
        ("$.features[0]", {"features": [9, 8]}, 9),
    ],
)
def test_supported_operators(path: str, value: Any, expected: Any) -> None:
    assert sel(path, value) == expected


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("$[5]", [1, 2], "out of range"),
        ("$[0,9]", [1, 2], "out of range"),
        ("$.x", {"a": 1}, "no key 'x'"),
        ("$['a','x']", {"a": 1}, r"no key\(s\) \['x'\]"),
        ("$.a", [1], "needs an object"),
        ("$[0]", {"a": 1}, "needs an array"),
    ],
)
def test_records_that_do_not_fit_the_filter(path: str, value: Any, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        sel(path, value)


@pytest.mark.parametrize("path", ["features", "$[", "$.a[1:].b", "$[a-b]", "$x", "$" + "a" * 63])
def test_unsupported_paths_are_config_errors(path: str) -> None:
    with pytest.raises(ConfigError):
        parse_path(path)


def test_response_split_per_record() -> None:
    assert split_response(b'{"a":1}\n{"a":2}\n', "application/jsonlines", 2) == [{"a": 1}, {"a": 2}]
    assert split_response(b"1.5\n2.5\n", "text/csv", 2) == [["1.5"], ["2.5"]]
    assert split_response(b'{"predictions": [1, 2]}', "application/json", 2) == [1, 2]
    assert split_response(b'{"labels": ["a"]}', "application/json", 1) == [{"labels": ["a"]}]
    with pytest.raises(ValueError, match="1 record"):
        split_response(b"1\n", "application/jsonlines", 2)


def test_shaper_joins_filters_and_assembles_lines() -> None:
    spec = TransformSpec(
        name="j",
        input_uri="/in",
        output_path="/out",
        model="/m",
        join_source=JoinSource.INPUT,
        output_filter="$[0,-1]",
        assemble_with=AssembleWith.LINE,
    )
    shaper = Shaper.for_spec(spec, "text/csv", "text/csv")
    assert shaper.shape(b"0.9\n0.1\n", [b"a,1,2", b"b,3,4"], 2) == b"a,0.9\nb,0.1\n"
    plain = Shaper.for_spec(spec.with_changes(join_source=JoinSource.NONE, output_filter="$"), "text/csv", "text/csv")
    assert plain.shape(b"0.9\n0.1", [], 2) == b"0.9\n0.1\n"  # AssembleWith=Line ends the response with \n
