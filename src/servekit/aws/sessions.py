"""Role sessions: temporary keys (``ASIA…`` with a session token), as STS AssumeRole gives, each allowed what its
role's policy allows and good until it expires or is revoked. A job's script gets one for its RoleArn, never the
home's admin key; it ends with the job. Kept in memory: a session outlives neither its job nor the plane."""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servekit.aws.credentials import AccessKey
from servekit.aws.sigv4 import KeyLookup

_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_SECRET_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def assumed_role_arn(role_arn: str, session_name: str) -> str:
    """``arn:aws:iam::<account>:role/<path/>Name`` as the caller AWS names: ``arn:aws:sts::<account>:assumed-role/
    Name/<session>``."""
    parts = role_arn.split(":", 5)
    if len(parts) != 6 or not parts[5].startswith("role/"):
        raise ValueError(f"{role_arn!r} is not a role ARN (arn:aws:iam::<account>:role/<name>)")
    return f"arn:{parts[1]}:sts::{parts[4]}:assumed-role/{parts[5].rsplit('/', 1)[-1]}/{session_name}"


class SessionKeys:
    """The live role sessions of this plane; a :class:`~servekit.aws.sigv4.KeyLookup`."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._keys: dict[str, AccessKey] = {}
        self._lock = threading.Lock()

    def mint(
        self, role_arn: str, session_name: str, policy: Sequence[Mapping[str, Any]], duration_s: float
    ) -> AccessKey:
        """A new session key for ``role_arn``, allowed what ``policy`` allows, for ``duration_s`` seconds."""
        key = AccessKey(
            "ASIA" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16)),
            "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40)),
            scope="invoke",  # never consulted: the policy decides
            name=assumed_role_arn(role_arn, session_name),
            session_token=base64.b64encode(secrets.token_bytes(96)).decode(),
            expires=self.clock() + duration_s,
            role_arn=role_arn,
            policy=tuple(policy),
        )
        with self._lock:
            self._drop_expired()
            self._keys[key.access_key_id] = key
        return key

    def revoke(self, access_key_id: str) -> None:
        with self._lock:
            self._keys.pop(access_key_id, None)

    def lookup(self, access_key_id: str) -> AccessKey | None:
        return self._keys.get(access_key_id)

    def _drop_expired(self) -> None:
        now = self.clock()
        for key_id in [k for k, v in self._keys.items() if v.expires is not None and v.expires <= now]:
            del self._keys[key_id]


class KeyChain:
    """Look a key up in each of ``lookups`` in turn (the home's keys, then the live role sessions)."""

    def __init__(self, *lookups: KeyLookup) -> None:
        self.lookups = lookups

    def lookup(self, access_key_id: str) -> AccessKey | None:
        for source in self.lookups:
            if (key := source.lookup(access_key_id)) is not None:
                return key
        return None
