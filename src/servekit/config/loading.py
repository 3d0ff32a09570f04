"""The only place that reads configuration files. Every error names the file and the field."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from servekit.config.models import AuthTokens, BatchingConfig, ModelConfig, VersionPolicy
from servekit.config.textproto import parse_textproto
from servekit.errors import ConfigError


def _one(msg: Mapping[str, Any], key: str, source: str, default: Any = None) -> Any:
    values = msg.get(key)
    if values is None:
        return default
    if isinstance(values, list):
        if len(values) != 1:
            raise ConfigError(f"{source}: field {key!r} given {len(values)} times")
        return values[0]
    return values


def _policy(raw: Any, source: str) -> VersionPolicy:
    if raw is None:
        return VersionPolicy()
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ConfigError(f"{source}: model_version_policy must hold exactly one of latest, all, specific")
    ((kind, body),) = raw.items()
    body = body[0] if isinstance(body, list) and body and isinstance(body[0], Mapping) else body
    body = body or {}
    try:
        return _policy_of(kind, body, source)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: model_version_policy: {exc}") from None


def _policy_of(kind: str, body: Any, source: str) -> VersionPolicy:
    if kind == "latest":
        return VersionPolicy("latest", num_versions=int(_one(body, "num_versions", source, 1)))
    if kind == "all":
        return VersionPolicy("all")
    if kind == "specific":
        versions = body.get("versions", [])
        versions = versions if isinstance(versions, list) else [versions]
        return VersionPolicy("specific", versions=frozenset(int(v) for v in versions))
    raise ConfigError(f"{source}: unknown model_version_policy {kind!r}; expected latest, all or specific")


def _labels(raw: Any, source: str) -> dict[str, int]:
    if raw is None:
        return {}
    if isinstance(raw, Mapping):  # YAML/TOML: {stable: 1}
        return {str(k): int(v) for k, v in raw.items()}
    labels: dict[str, int] = {}
    for entry in raw:  # text proto: repeated {key: 'stable' value: 1}
        key, value = _one(entry, "key", source), _one(entry, "value", source)
        if key is None or value is None:
            raise ConfigError(f"{source}: version_labels entries need key and value")
        labels[str(key)] = int(value)
    return labels


def _model(entry: Mapping[str, Any], source: str, base_dir: Path) -> ModelConfig:
    allowed = {
        "name",
        "base_path",
        "model_platform",
        "model_version_policy",
        "version_labels",
        "logging_config",
        "batching",
        "batching_parameters",
    }
    unknown = set(entry) - allowed
    if unknown:
        raise ConfigError(f"{source}: unknown model config field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    name = _one(entry, "name", source)
    base_path = _one(entry, "base_path", source)
    if not name or not base_path:
        raise ConfigError(f"{source}: every model config needs name and base_path")
    base_path = str(base_path)
    if "://" not in base_path and not os.path.isabs(base_path):
        base_path = str((base_dir / base_path).resolve())
    platform = str(_one(entry, "model_platform", source, "") or "")
    policy = _policy(_one(entry, "model_version_policy", source), f"{source} (model {name})")
    try:
        return ModelConfig(
            name=str(name),
            base_path=base_path,
            platform="" if platform == "tensorflow" else platform,
            version_policy=policy,
            version_labels=_labels(entry.get("version_labels"), source),
            batching=_batching_entry(entry, f"{source} (model {name})"),
        )
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def parse_model_config(text: str, source: str, base_dir: Path | None = None) -> tuple[ModelConfig, ...]:
    """Parse a model config in TF Serving text format, YAML or TOML (chosen by ``source``'s suffix)."""
    base = base_dir or Path(source).resolve().parent
    suffix = Path(source).suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            data: Any = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
        entries = data.get("model_config_list", []) if isinstance(data, Mapping) else None
    elif suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
        entries = data.get("model_config_list", [])
    else:
        msg = parse_textproto(text, source)
        lists = msg.get("model_config_list", [])
        if len(lists) > 1:
            raise ConfigError(f"{source}: model_config_list given {len(lists)} times")
        entries = lists[0].get("config", []) if lists else []
        if isinstance(entries, list):
            entries = [dict(e) for e in entries]
    if isinstance(entries, Mapping) and "config" in entries:  # YAML written like the text format
        entries = entries["config"]
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: model_config_list must be a list of model configs")
    models = tuple(_model(e, source, base) for e in entries)
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: model names must be unique, got {names}")
    return models


def load_model_config_file(path: str | os.PathLike[str]) -> tuple[ModelConfig, ...]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read model config file {p}: {exc.strerror}") from exc
    return parse_model_config(text, str(p), p.resolve().parent)


_BATCHING_INT = (
    "max_batch_size",
    "batch_timeout_micros",
    "max_enqueued_batches",
    "num_batch_threads",
    "max_execution_batch_size",
)
_BATCHING_IGNORED = ("thread_pool_name", "pad_variable_length_inputs")


def _batching_entry(entry: Mapping[str, Any], source: str) -> BatchingConfig | None:
    raw = entry.get("batching", entry.get("batching_parameters"))
    if raw is None:
        return None
    if isinstance(raw, list):  # text format: one nested message
        raw = _one({"b": raw}, "b", source)
    return batching_from_mapping(raw, source)


def _unwrap(value: Any) -> Any:
    """TF's text format wraps scalars: ``max_batch_size { value: 128 }``; lists hold one entry per field."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else value
    if isinstance(value, Mapping) and set(value) == {"value"}:
        return _unwrap(value["value"])
    return value


def _integer(value: Any) -> int:
    v = _unwrap(value)
    if isinstance(v, list):
        raise ValueError(f"expected one value, got {len(v)}")
    if isinstance(v, bool) or not isinstance(v, int | str):  # no silent 12.5 -> 12 or true -> 1
        raise ValueError(f"expected an integer, got {v!r}")
    return int(v)


def _flag(value: Any) -> bool:
    v = _unwrap(value)
    if isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)):
        return bool(v)
    raise ValueError(f"expected true or false, got {v!r}")  # bool("false") would be True


def batching_from_mapping(raw: Any, source: str) -> BatchingConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: batching parameters must be a mapping of field to value")
    known = (*_BATCHING_INT, "allowed_batch_sizes", "enable_large_batch_splitting", "target_p99_ms", *_BATCHING_IGNORED)
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"{source}: unknown batching parameter(s) {sorted(unknown)}; known: {sorted(known)}")

    def sizes(value: Any) -> tuple[int, ...]:
        return tuple(_integer(v) for v in (value if isinstance(value, list) else [value]))

    def real(value: Any) -> float:
        v = _unwrap(value)
        if isinstance(v, bool | list):
            raise ValueError(f"expected a number, got {v!r}")
        return float(v)

    converters: dict[str, Callable[[Any], Any]] = dict.fromkeys(_BATCHING_INT, _integer)
    converters.update(allowed_batch_sizes=sizes, enable_large_batch_splitting=_flag, target_p99_ms=real)
    kwargs: dict[str, Any] = {}
    for key, convert in converters.items():
        if key in raw:
            try:
                kwargs[key] = convert(raw[key])
            except (TypeError, ValueError) as exc:  # the error names the field
                raise ConfigError(f"{source}: batching parameter {key!r}: {exc}") from None
    try:
        return BatchingConfig(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_batching_file(path: str | os.PathLike[str]) -> BatchingConfig:
    """``--batching_parameters_file``: TF Serving's BatchingParameters text format, or YAML/TOML."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read batching parameters file {p}: {exc.strerror}") from exc
    suffix = p.suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            raw: Any = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: invalid YAML: {exc}") from exc
    elif suffix == ".toml":
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: invalid TOML: {exc}") from exc
    else:
        raw = parse_textproto(text, str(p))
    return batching_from_mapping(raw, str(p))


_SCOPES = ("inference", "admin")


def parse_auth_tokens(text: str, source: str) -> AuthTokens:
    """Bearer tokens, one a line: ``inference:<token>`` (inference endpoints only), ``admin:<token>`` (status,
    metadata and metrics only) or a plain ``<token>`` (both). Blank lines and ``#`` comments are skipped.
    Errors name the line, never the token."""
    scopes: dict[str, set[str]] = {scope: set() for scope in _SCOPES}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        prefix, sep, rest = line.partition(":")
        wanted: tuple[str, ...]
        if sep and prefix in _SCOPES:
            token, wanted = rest.strip(), (prefix,)
        else:
            token, wanted = line, _SCOPES
        if not token:
            raise ConfigError(f"{source}, line {lineno}: no token after {prefix}:")
        for scope in wanted:
            scopes[scope].add(token)
    return AuthTokens(frozenset(scopes["inference"]), frozenset(scopes["admin"]), source)


def load_auth_token_file(path: str | os.PathLike[str]) -> AuthTokens:
    """``--auth_token_file``: see :func:`parse_auth_tokens`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read auth token file {p}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: auth token file is not UTF-8 text") from None
    return parse_auth_tokens(text, str(p))
