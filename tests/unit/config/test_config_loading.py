from pathlib import Path

import pytest

from servekit.config.loading import load_model_config_file, parse_model_config
from servekit.config.models import ModelConfig, ServerConfig, VersionPolicy
from servekit.config.textproto import parse_textproto
from servekit.errors import ConfigError

TEXT = """
# TF Serving's example, verbatim shape
model_config_list {
  config {
    name: 'my_model'
    base_path: '/models/my_model'
    model_platform: 'tensorflow'
    model_version_policy { specific { versions: 42 versions: 43 } }
    version_labels { key: 'stable' value: 42 }
    version_labels { key: 'canary' value: 43 }
  }
  config: {
    name: "other", base_path: "/models/other"
    model_version_policy: { latest: { num_versions: 2 } }
  }
  config { name: 'third' base_path: '/models/third' model_version_policy { all {} } }
}
"""


def test_text_format() -> None:
    models = parse_model_config(TEXT, "models.config", Path("/"))
    assert [m.name for m in models] == ["my_model", "other", "third"]
    first = models[0]
    assert first.base_path == "/models/my_model"
    assert first.platform == ""  # 'tensorflow' means "choose from the files"
    assert first.version_policy == VersionPolicy("specific", versions=frozenset({42, 43}))
    assert dict(first.version_labels) == {"stable": 42, "canary": 43}
    assert models[1].version_policy == VersionPolicy("latest", num_versions=2)
    assert models[2].version_policy == VersionPolicy("all")


def test_yaml_and_toml_equivalents(tmp_path: Path) -> None:
    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text(
        "model_config_list:\n"
        "  - name: my_model\n"
        "    base_path: /models/my_model\n"
        "    model_version_policy: {specific: {versions: [42, 43]}}\n"
        "    version_labels: {stable: 42, canary: 43}\n"
        "  - name: other\n"
        "    base_path: relative/other\n"
        "    model_version_policy: {latest: {num_versions: 2}}\n"
    )
    toml_file = tmp_path / "models.toml"
    toml_file.write_text(
        "[[model_config_list]]\n"
        'name = "my_model"\n'
        'base_path = "/models/my_model"\n'
        "model_version_policy = { specific = { versions = [42, 43] } }\n"
        "version_labels = { stable = 42, canary = 43 }\n"
        "[[model_config_list]]\n"
        'name = "other"\n'
        'base_path = "relative/other"\n'
        "model_version_policy = { latest = { num_versions = 2 } }\n"
    )
    text = parse_model_config(TEXT, "x.config", Path("/"))[0]
    for f in (yaml_file, toml_file):
        models = load_model_config_file(f)
        assert models[0] == text
        assert models[1].base_path == str(tmp_path / "relative" / "other")  # relative to the config file
        assert models[1].version_policy.num_versions == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("model_config_list { config { name: 'a' base_path: '/a' }", "missing '}'"),
        ("model_config_list { config { name: 'a' base_path: } }", "expected a value"),
        ("model_config_list { config { name 'a' base_path: '/a' @ } }", "unexpected character"),
        ("model_config_list { config { base_path: '/a' } }", "needs name and base_path"),
        ("model_config_list { config { name: 'a' base_path: '/a' colour: 'red' } }", "unknown model config field"),
        (
            "model_config_list { config { name: 'a' base_path: '/a' model_version_policy { newest {} } } }",
            "unknown model_version_policy",
        ),
        ("model_config_list { config { name: 'a' base_path: '/a' } config { name: 'a' base_path: '/b' } }", "unique"),
        (
            "model_config_list { config { name: 'a' base_path: '/a' version_labels { key: 'bad-label' value: 1 } } }",
            "label",
        ),
    ],
)
def test_text_errors_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        parse_model_config(text, "models.config", Path("/"))
    assert "models.config" in str(info.value)


def test_error_has_line_and_column() -> None:
    with pytest.raises(ConfigError, match=r"models.config:3:"):
        parse_textproto("a {\n  b: 1\n  c: }\n", "models.config")


def test_textproto_scalars_and_lists() -> None:
    msg = parse_textproto("x: 1 y: 2.5 z: true s: \"a\" 'b' l: [1, 2, 3] n < k: -4 >")
    assert msg == {"x": [1], "y": [2.5], "z": [True], "s": ["ab"], "l": [1, 2, 3], "n": [{"k": [-4]}]}


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read model config file"):
        load_model_config_file("/nonexistent/models.config")


def test_invalid_yaml(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("model_config_list: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_model_config_file(f)


def test_server_config_rejects_duplicates() -> None:
    m = ModelConfig("a", "/a")
    with pytest.raises(ConfigError, match="unique"):
        ServerConfig(models=(m, m))


def test_model_config_is_frozen() -> None:
    m = ModelConfig("a", "/a", version_labels={"stable": 1})
    with pytest.raises(AttributeError):
        m.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.version_labels["x"] = 2  # type: ignore[index]
