"""KMS's cryptography, real: AES-256-GCM for a key's ciphertexts (the encryption context authenticated, not
encrypted, as AWS's is), and for wrapping key material under the home's master key.

A ciphertext blob is ``VERSION || key id (36 bytes) || nonce (12) || AES-GCM(ciphertext || tag)``: opaque to
clients as AWS's is, and naming its key, so Decrypt needs no KeyId (as with AWS's symmetric keys).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = b"\x01"
KEY_ID_BYTES = 36  # a UUID's text
NONCE_BYTES = 12
MATERIAL_BYTES = 32  # AES-256
MASTER = Path("kms") / "master.key"  # under the home


class BadCiphertext(ValueError):
    """A blob this KMS did not make, altered, or decrypted with another encryption context."""


class MasterKeyError(RuntimeError):
    """A key's material does not open with the home's master key (the file was replaced or lost)."""


def new_material() -> bytes:
    return secrets.token_bytes(MATERIAL_BYTES)


def _context(context: Mapping[str, str] | None) -> bytes:
    """The encryption context as the AAD: canonical JSON, so the same pairs in any order authenticate."""
    return json.dumps(dict(context or {}), sort_keys=True, separators=(",", ":")).encode()


def encrypt(material: bytes, key_id: str, plaintext: bytes, context: Mapping[str, str] | None) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    head = VERSION + key_id.encode("ascii")
    return head + nonce + AESGCM(material).encrypt(nonce, plaintext, head + _context(context))


def key_id_of(blob: bytes) -> str:
    """The key a blob names; :class:`BadCiphertext` for one that is not this KMS's."""
    if len(blob) < 1 + KEY_ID_BYTES + NONCE_BYTES + 16 or blob[:1] != VERSION:
        raise BadCiphertext("not a ciphertext of this KMS")
    try:
        return blob[1 : 1 + KEY_ID_BYTES].decode("ascii")
    except UnicodeDecodeError:
        raise BadCiphertext("not a ciphertext of this KMS") from None


def decrypt(material: bytes, blob: bytes, context: Mapping[str, str] | None) -> bytes:
    head, nonce = blob[: 1 + KEY_ID_BYTES], blob[1 + KEY_ID_BYTES : 1 + KEY_ID_BYTES + NONCE_BYTES]
    try:
        return AESGCM(material).decrypt(nonce, blob[1 + KEY_ID_BYTES + NONCE_BYTES :], head + _context(context))
    except InvalidTag:
        raise BadCiphertext("the ciphertext or its encryption context does not match") from None


class Master:
    """The home's master key: wraps and unwraps the keys' material. Made on first use, 0600, written atomically."""

    def __init__(self, home: Path) -> None:
        self.path = home / MASTER
        self._key: bytes | None = None

    def _get(self) -> bytes:
        if self._key is None:
            if not self.path.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(MATERIAL_BYTES))
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, self.path)  # never replaces one another process made first
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink()
            self._key = self.path.read_bytes()
        return self._key

    def wrap(self, material: bytes, key_id: str) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce + AESGCM(self._get()).encrypt(nonce, material, key_id.encode())

    def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        try:
            return AESGCM(self._get()).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise MasterKeyError(f"key {key_id}'s material does not open with {self.path}") from None
