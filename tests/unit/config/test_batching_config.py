"""Batching configuration: ``--batching_parameters_file`` (TF text format, YAML, TOML) and per-model blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.config.loading import batching_from_mapping, load_batching_file, parse_model_config
from servekit.config.models import BatchingConfig, ModelConfig
from servekit.errors import ConfigError

# TF Serving's BatchingParameters, as its docs write them: wrapped scalars, a repeated list field.
TEXT = """
# comments are allowed
max_batch_size { value: 128 }
batch_timeout_micros { value: 2000 }
max_enqueued_batches { value: 16 }
num_batch_threads { value: 4 }
allowed_batch_sizes: 32
allowed_batch_sizes: 64
allowed_batch_sizes: 128
enable_large_batch_splitting { value: true }
max_execution_batch_size { value: 128 }
pad_variable_length_inputs: true
thread_pool_name { value: "batch_threads" }
"""
EXPECTED = BatchingConfig(
    max_batch_size=128,
    batch_timeout_micros=2000,
    max_enqueued_batches=16,
    num_batch_threads=4,
    allowed_batch_sizes=(32, 64, 128),
    enable_large_batch_splitting=True,
    max_execution_batch_size=128,
)
YAML = """
max_batch_size: 128
batch_timeout_micros: 2000
max_enqueued_batches: 16
num_batch_threads: 4
allowed_batch_sizes: [32, 64, 128]
enable_large_batch_splitting: true
max_execution_batch_size: 128
"""
TOML = """
max_batch_size = 128
batch_timeout_micros = 2000
max_enqueued_batches = 16
num_batch_threads = 4
allowed_batch_sizes = [32, 64, 128]
enable_large_batch_splitting = true
max_execution_batch_size = 128
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "text"), [("batching.config", TEXT), ("b.yaml", YAML), ("b.yml", YAML), ("b.toml", TOML)]
)
def test_every_format_gives_the_same_config(tmp_path: Path, name: str, text: str) -> None:
    assert load_batching_file(write(tmp_path, name, text)) == EXPECTED


def test_text_format_also_takes_bare_scalars_and_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, "b.txt", "max_batch_size: 8 batch_timeout_micros: 0 allowed_batch_sizes: [2, 4, 8]")
    cfg = load_batching_file(path)
    assert cfg == BatchingConfig(max_batch_size=8, batch_timeout_micros=0, allowed_batch_sizes=(2, 4, 8))


def test_unset_fields_keep_their_defaults_and_an_empty_file_is_all_defaults(tmp_path: Path) -> None:
    assert load_batching_file(write(tmp_path, "b.config", "max_batch_size { value: 7 }\n")) == BatchingConfig(
        max_batch_size=7
    )
    assert load_batching_file(write(tmp_path, "empty.yaml", "")) == BatchingConfig()
    assert load_batching_file(write(tmp_path, "empty.config", "# nothing\n")) == BatchingConfig()


def test_latency_target_and_derived_sizes(tmp_path: Path) -> None:
    cfg = load_batching_file(
        write(tmp_path, "b.toml", "max_batch_size = 32\nmax_enqueued_batches = 3\ntarget_p99_ms = 12.5\n")
    )
    assert cfg.target_p99_ms == 12.5
    assert cfg.queue_capacity_rows == 96
    assert cfg.execution_batch_size == 32
    split = BatchingConfig(max_batch_size=256, max_execution_batch_size=64)
    assert split.execution_batch_size == 64
    assert BatchingConfig(max_batch_size=256, max_execution_batch_size=64, enable_large_batch_splitting=False) == (
        BatchingConfig(max_batch_size=256, max_execution_batch_size=64, enable_large_batch_splitting=False)
    )
    assert (
        BatchingConfig(
            max_batch_size=256, max_execution_batch_size=64, enable_large_batch_splitting=False
        ).execution_batch_size
        == 256
    )


@pytest.mark.parametrize(
    ("name", "text", "fragments"),
    [
        ("b.config", "max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }\n", ["max_batch_sise", "unknown"]),
        ("b.yaml", "max_batch_size: 8\nbatch_timeout: 5\n", ["batch_timeout", "unknown"]),
        ("b.toml", "num_threads = 2\n", ["num_threads", "unknown"]),
        ("b.config", "max_batch_size { value: 0 }\n", ["max_batch_size", ">= 1"]),
        ("b.yaml", "num_batch_threads: 0\n", ["num_batch_threads"]),
        ("b.toml", "max_enqueued_batches = 0\n", ["max_enqueued_batches"]),
        ("b.config", "batch_timeout_micros { value: -1 }\n", ["batch_timeout_micros"]),
        ("b.config", 'max_batch_size { value: "big" }\n', ["max_batch_size", "big"]),
        ("b.yaml", "batch_timeout_micros: [1, 2]\n", ["batch_timeout_micros"]),
        ("b.config", "max_batch_size { value: 8 }\nmax_batch_size { value: 16 }\n", ["max_batch_size"]),
        ("b.yaml", "max_batch_size: 12.5\n", ["max_batch_size", "12.5"]),
        ("b.toml", 'enable_large_batch_splitting = "false"\n', ["enable_large_batch_splitting"]),
        ("b.config", "max_batch_size: 64 allowed_batch_sizes: [8, 4, 64]\n", ["allowed_batch_sizes", "increasing"]),
        ("b.config", "max_batch_size: 64 allowed_batch_sizes: [8, 32]\n", ["allowed_batch_sizes", "(32)", "(64)"]),
        ("b.yaml", "allowed_batch_sizes: [4, x]\n", ["allowed_batch_sizes"]),
        ("b.toml", "target_p99_ms = -1.0\n", ["target_p99_ms"]),
        ("b.yaml", "- max_batch_size: 8\n", ["must be a mapping"]),
        ("b.yaml", "max_batch_size: [8\n", ["invalid YAML"]),
        ("b.toml", "max_batch_size = \n", ["invalid TOML"]),
        ("b.config", "max_batch_size { value: 8 \n", ["missing '}'"]),
    ],
)
def test_errors_name_the_file_and_the_field(tmp_path: Path, name: str, text: str, fragments: list[str]) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError) as info:
        load_batching_file(path)
    message = str(info.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_text_syntax_errors_carry_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "b.config", "max_batch_size { value: 8 }\nbatch_timeout_micros { value: }\n")
    with pytest.raises(ConfigError, match=rf"{path}:2:\d+: expected a value"):
        load_batching_file(path)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match=r"cannot read batching parameters file /nonexistent/b\.config"):
        load_batching_file("/nonexistent/b.config")


def test_mapping_entry_point_names_its_source() -> None:
    assert batching_from_mapping({"max_batch_size": {"value": 4}}, "flags") == BatchingConfig(max_batch_size=4)
    with pytest.raises(ConfigError, match=r"^flags: unknown batching parameter\(s\) \['colour'\]"):
        batching_from_mapping({"colour": "red"}, "flags")


# ---- per-model batching in model config files ------------------------------------------------------------
MODELS_TEXT = """
model_config_list {
  config {
    name: 'fast'
    base_path: '/models/fast'
    batching_parameters {
      max_batch_size { value: 8 }
      batch_timeout_micros { value: 500 }
      allowed_batch_sizes: 4
      allowed_batch_sizes: 8
    }
  }
  config { name: 'plain' base_path: '/models/plain' }
}
"""
MODELS_YAML = """
model_config_list:
  - name: fast
    base_path: /models/fast
    batching: {max_batch_size: 8, batch_timeout_micros: 500, allowed_batch_sizes: [4, 8]}
  - name: plain
    base_path: /models/plain
"""
MODELS_YAML_TF_SPELLING = """
model_config_list:
  - name: fast
    base_path: /models/fast
    batching_parameters:
      max_batch_size: {value: 8}
      batch_timeout_micros: {value: 500}
      allowed_batch_sizes: [4, 8]
  - name: plain
    base_path: /models/plain
"""
MODELS_TOML = """
[[model_config_list]]
name = "fast"
base_path = "/models/fast"
batching = { max_batch_size = 8, batch_timeout_micros = 500, allowed_batch_sizes = [4, 8] }

[[model_config_list]]
name = "plain"
base_path = "/models/plain"
"""
FAST = BatchingConfig(max_batch_size=8, batch_timeout_micros=500, allowed_batch_sizes=(4, 8))


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("models.config", MODELS_TEXT),
        ("models.yaml", MODELS_YAML),
        ("models.yml", MODELS_YAML_TF_SPELLING),
        ("models.toml", MODELS_TOML),
    ],
)
def test_per_model_batching_in_every_config_format(source: str, text: str) -> None:
    fast, plain = parse_model_config(text, source, Path("/"))
    assert (fast.name, fast.batching) == ("fast", FAST)
    assert (plain.name, plain.batching) == ("plain", None)


@pytest.mark.parametrize(
    ("source", "text", "fragments"),
    [
        (
            "models.config",
            "model_config_list { config { name: 'a' base_path: '/a' "
            "batching_parameters { max_batch_size { value: 0 } } } }",
            ["models.config", "model a", "max_batch_size"],
        ),
        (
            "models.config",
            "model_config_list { config { name: 'a' base_path: '/a' "
            "batching_parameters { max_batch_size: 2 } batching_parameters { max_batch_size: 4 } } }",
            ["models.config", "given 2 times"],
        ),
        (
            "models.yaml",
            "model_config_list:\n  - name: a\n    base_path: /a\n    batching: {max_batch: 4}\n",
            ["models.yaml", "model a", "max_batch"],
        ),
        (
            "models.toml",
            '[[model_config_list]]\nname = "a"\nbase_path = "/a"\nbatching = 4\n',
            ["models.toml", "model a", "must be a mapping"],
        ),
    ],
)
def test_per_model_batching_errors_name_file_model_and_field(source: str, text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_model_config(text, source, Path("/"))
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_model_config_with_batching_survives_pickling() -> None:
    """Worker processes receive their configs pickled."""
    import pickle

    m = ModelConfig(name="fast", base_path="/m", version_labels={"stable": 1}, batching=FAST)
    assert pickle.loads(pickle.dumps(m)) == m
