"""Access keys for the local AWS APIs, kept in ``<home>/credentials.json`` (mode 0600, created on first use).

Each key has a *scope*: ``admin`` (every operation) or ``invoke`` (the runtime API only). The file holds secrets,
so nothing here logs or prints a secret, and :class:`AccessKey`'s ``repr`` leaves it out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servekit.aws.errors import access_denied
from servekit.aws.policy import allowed

Scope = Literal["admin", "invoke"]
SCOPES: tuple[Scope, ...] = ("admin", "invoke")
FILENAME = "credentials.json"
DEFAULT_REGION = "us-east-1"

log = logging.getLogger(__name__)

_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_SECRET_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    scope: Scope = "admin"
    name: str = ""
    # A role session's key (servekit.aws.sessions): its token, which every request must carry, when it expires
    # (epoch seconds), the role, and the policy documents that decide what it may do instead of ``scope``
    session_token: str | None = field(default=None, repr=False)
    expires: float | None = None
    role_arn: str = ""
    policy: tuple[Mapping[str, Any], ...] | None = field(default=None, repr=False, compare=False)

    def allows(self, needed: Scope) -> bool:
        return self.policy is None and (self.scope == "admin" or self.scope == needed)

    def as_env(self, region: str = DEFAULT_REGION) -> dict[str, str]:
        """The environment variables boto3 and the AWS CLI read."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_DEFAULT_REGION": region,
        }


def new_key(scope: Scope = "admin", name: str = "") -> AccessKey:
    """A fresh key pair shaped like AWS's (``AKIA`` + 16 characters; a 40-character secret)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
    key_id = "AKIA" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))
    return AccessKey(key_id, secret, scope, name or scope)


def authorize(key: AccessKey, needed: Scope, action: str, resource: str = "*") -> None:
    """Raise ``AccessDeniedException`` unless ``key`` may perform ``action`` (e.g. ``sagemaker:CreateEndpoint``) on
    ``resource`` (an ARN): a role session's key by its policy, any other by its scope."""
    if key.policy is not None:
        if not allowed(key.policy, action, resource):
            raise access_denied(
                f"User: {key.name or key.access_key_id} is not authorized to perform: {action} on resource: "
                f"{resource} because no identity-based policy allows the {action} action"
            )
        return
    if not key.allows(needed):
        raise access_denied(
            f"User: {key.name or key.access_key_id} is not authorized to perform: {action} "
            f"because its access key {key.access_key_id} is limited to '{key.scope}' operations"
        )


class Credentials:
    """The key pairs in one servekit home.

    :meth:`lookup` notices when the file has been replaced (a key added or removed by another process, e.g.
    the CLI while ``servekit up`` runs) and reads it again, so such changes take effect without a restart.
    """

    def __init__(self, path: Path, keys: Mapping[str, AccessKey]) -> None:
        self.path = path
        self._keys = dict(keys)
        self._stamp = _stamp(path)

    # -- reading
    def lookup(self, access_key_id: str) -> AccessKey | None:
        stamp = _stamp(self.path)
        if stamp != self._stamp and stamp is not None:
            try:
                self._keys = dict(Credentials.load(self.path.parent)._keys)
            except (OSError, ValueError):
                log.warning("could not re-read %s; keeping the keys read before", self.path)
            self._stamp = stamp
        return self._keys.get(access_key_id)

    @property
    def keys(self) -> list[AccessKey]:
        return list(self._keys.values())

    @property
    def admin(self) -> AccessKey:
        """The first admin key (there is always one in a file this class created)."""
        for key in self._keys.values():
            if key.scope == "admin":
                return key
        raise LookupError(f"{self.path} holds no admin key")

    def first(self, scope: Scope) -> AccessKey:
        for key in self._keys.values():
            if key.scope == scope:
                return key
        raise LookupError(f"{self.path} holds no {scope!r} key")

    # -- loading and writing
    @classmethod
    def load(cls, home: str | os.PathLike[str]) -> Credentials:
        """Read ``<home>/credentials.json`` (``FileNotFoundError`` if absent)."""
        path = Path(home) / FILENAME
        text = path.read_text()
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("%s is readable by other users (mode %o); it should be 0600", path, mode)
        try:
            data = json.loads(text)
            keys = [
                AccessKey(
                    k["access_key_id"], k["secret_access_key"], _scope(k.get("scope", "admin")), k.get("name", "")
                )
                for k in data["keys"]
            ]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a servekit credentials file: {e}") from None
        return cls(path, {k.access_key_id: k for k in keys})

    @classmethod
    def load_or_create(cls, home: str | os.PathLike[str]) -> Credentials:
        """The home's credentials, creating the file with one admin key (mode 0600) the first time."""
        root = Path(home)
        path = root / FILENAME
        if not path.exists():
            root.mkdir(parents=True, exist_ok=True)
            admin = new_key("admin", "admin")
            try:
                _publish(path, _document([admin]), exclusive=True)
            except FileExistsError:
                pass  # another process created it first: use theirs
        return cls.load(root)

    def add_key(self, scope: Scope = "invoke", name: str = "") -> AccessKey:
        """Create, store and return a new key pair (e.g. an invoke-only one for an application)."""
        key = new_key(scope, name)
        self._keys[key.access_key_id] = key
        _publish(self.path, _document(self.keys), exclusive=False)
        self._stamp = _stamp(self.path)
        return key

    def remove_key(self, access_key_id: str) -> bool:
        if access_key_id not in self._keys:
            return False
        del self._keys[access_key_id]
        _publish(self.path, _document(self.keys), exclusive=False)
        self._stamp = _stamp(self.path)
        return True


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _scope(value: Any) -> Scope:
    if value not in SCOPES:
        raise ValueError(f"unknown scope {value!r}")
    return value  # type: ignore[no-any-return]


def _document(keys: list[AccessKey]) -> str:
    return json.dumps(
        {
            "version": 1,
            "keys": [
                {
                    "name": k.name,
                    "scope": k.scope,
                    "access_key_id": k.access_key_id,
                    "secret_access_key": k.secret_access_key,
                }
                for k in keys
            ],
        },
        indent=2,
    )


def _publish(path: Path, text: str, exclusive: bool) -> None:
    """Write ``text`` to a 0600 temporary file beside ``path`` and move it into place: readers never see a
    partial file; ``exclusive`` fails with ``FileExistsError`` instead of replacing an existing one."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def client(
    home: str | os.PathLike[str],
    service: str,
    endpoint_url: str,
    region: str = DEFAULT_REGION,
    scope: Scope = "admin",
    config: Any = None,
) -> Any:
    """A botocore client (the same object boto3 returns) for ``service`` at ``endpoint_url``, signed with the
    home's first key of ``scope``; what the ``servekit`` CLI uses to talk to ``servekit up``. ``FileNotFoundError``
    when the home has no key file (``servekit up`` creates it): a fresh key would only be refused."""
    import botocore.session

    key = Credentials.load(home).first(scope)  # a home without keys is a mistake to report, not to paper over
    session = botocore.session.get_session()
    return session.create_client(
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
        config=config,
    )
