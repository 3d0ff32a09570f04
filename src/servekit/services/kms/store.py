"""KMS keys and aliases: each key's metadata (what DescribeKey answers), its key policy, its tags and its key
material, wrapped; the aliases that name keys.

The repository stores what it is given; what a state means (which operations a disabled or pending key refuses)
belongs to :mod:`servekit.services.kms.api`, the cryptography to :mod:`servekit.services.kms.crypto`. Guarantees:

- **Key material never lies in the database in the clear**: ``material`` holds it wrapped (AES-GCM) under the
  home's own key (``<home>/kms/master.key``, 0600), so a copy of the database alone decrypts nothing.
- Alias names are unique; deleting a key deletes its aliases in the same transaction.
- **Time comes from the injected clock** (``clock``, seconds since the epoch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration

AGGREGATE = "kms"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "KMS keys (metadata, policy, tags, wrapped material) and aliases",
        (
            """CREATE TABLE kms_keys (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                key_id TEXT NOT NULL UNIQUE,
                created REAL NOT NULL,
                description TEXT NOT NULL,
                state TEXT NOT NULL,
                manager TEXT NOT NULL,
                deletion_date REAL,
                pending_days INTEGER,
                policy TEXT NOT NULL,
                tags TEXT NOT NULL,
                material BLOB NOT NULL
            )""",
            """CREATE TABLE kms_aliases (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE,
                key_id TEXT NOT NULL,
                created REAL NOT NULL,
                updated REAL NOT NULL
            )""",
        ),
    ),
)

_COLUMNS = "seq, key_id, created, description, state, manager, deletion_date, pending_days, policy, tags, material"


@dataclass(frozen=True, slots=True)
class KeyRow:
    key_id: str
    created: float
    description: str
    state: str  # Enabled | Disabled | PendingDeletion
    manager: str  # CUSTOMER | AWS (alias/aws/<service>, made on first use)
    deletion_date: float | None
    pending_days: int | None
    policy: str
    tags: list[dict[str, str]]
    material: bytes  # wrapped


@dataclass(frozen=True, slots=True)
class AliasRow:
    name: str
    key_id: str
    created: float
    updated: float


def _key(r: Sequence[Any]) -> KeyRow:
    return KeyRow(
        r[1], float(r[2]), r[3], r[4], r[5], None if r[6] is None else float(r[6]), r[7], r[8], orjson.loads(r[9]),
        bytes(r[10]),
    )  # fmt: skip


class AliasExists(ValueError):
    """An alias of that name exists."""


class Keys:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    def create(
        self,
        key_id: str,
        description: str,
        policy: str,
        tags: Sequence[Mapping[str, str]],
        material: bytes,
        manager: str = "CUSTOMER",
    ) -> KeyRow:
        with transaction(self.conn) as c:
            c.execute(
                "INSERT INTO kms_keys (key_id, created, description, state, manager, deletion_date, pending_days, "
                "policy, tags, material) VALUES (?, ?, ?, 'Enabled', ?, NULL, NULL, ?, ?, ?)",
                (key_id, self.clock(), description, manager, policy, orjson.dumps([dict(t) for t in tags]).decode(),
                 material),
            )  # fmt: skip
        found = self.get(key_id)
        assert found is not None
        return found

    def get(self, key_id: str) -> KeyRow | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM kms_keys WHERE key_id = ?", (key_id,)).fetchone()
        return _key(row) if row else None

    def listed(self) -> list[KeyRow]:
        return [_key(r) for r in self.conn.execute(f"SELECT {_COLUMNS} FROM kms_keys ORDER BY seq").fetchall()]

    def update(self, key_id: str, **values: Any) -> None:
        """Set the given columns (``state``, ``description``, ``deletion_date``, ``pending_days``, ``policy``,
        ``tags`` as a list) of the key."""
        if "tags" in values:
            values["tags"] = orjson.dumps(values["tags"]).decode()
        sets = ", ".join(f"{column} = ?" for column in values)
        with transaction(self.conn) as c:
            c.execute(f"UPDATE kms_keys SET {sets} WHERE key_id = ?", (*values.values(), key_id))

    def delete(self, key_id: str) -> None:
        """The key and its aliases (a key whose waiting period has passed)."""
        with transaction(self.conn) as c:
            c.execute("DELETE FROM kms_keys WHERE key_id = ?", (key_id,))
            c.execute("DELETE FROM kms_aliases WHERE key_id = ?", (key_id,))

    # ---- aliases ----------------------------------------------------------------------------------------------
    def alias(self, name: str) -> AliasRow | None:
        row = self.conn.execute(
            "SELECT name, key_id, created, updated FROM kms_aliases WHERE name = ?", (name,)
        ).fetchone()
        return AliasRow(row[0], row[1], float(row[2]), float(row[3])) if row else None

    def aliases(self, key_id: str | None = None) -> list[AliasRow]:
        sql = "SELECT name, key_id, created, updated FROM kms_aliases"
        rows = (
            self.conn.execute(sql + " WHERE key_id = ? ORDER BY name", (key_id,)).fetchall()
            if key_id is not None
            else self.conn.execute(sql + " ORDER BY name").fetchall()
        )
        return [AliasRow(r[0], r[1], float(r[2]), float(r[3])) for r in rows]

    def create_alias(self, name: str, key_id: str) -> None:
        now = self.clock()
        with transaction(self.conn) as c:
            if c.execute("SELECT 1 FROM kms_aliases WHERE name = ?", (name,)).fetchone():
                raise AliasExists(name)
            c.execute(
                "INSERT INTO kms_aliases (name, key_id, created, updated) VALUES (?, ?, ?, ?)", (name, key_id, now, now)
            )

    def point_alias(self, name: str, key_id: str) -> bool:
        with transaction(self.conn) as c:
            changed = c.execute(
                "UPDATE kms_aliases SET key_id = ?, updated = ? WHERE name = ?", (key_id, self.clock(), name)
            ).rowcount
        return bool(changed)

    def delete_alias(self, name: str) -> bool:
        with transaction(self.conn) as c:
            gone = c.execute("DELETE FROM kms_aliases WHERE name = ?", (name,)).rowcount
        return bool(gone)
