"""IAM roles: each role's record (what GetRole answers), its inline policies and its attached managed policies.

The repository stores what it is given, documents as their JSON text; what a policy allows belongs to
:mod:`servekit.aws.policy`, which documents are known managed policies to :mod:`servekit.services.iam.managed`.
Guarantees:

- **Role names are unique without regard to case**, as IAM's are ("Role names are not distinguished by case"):
  ``name_key`` holds the lower-cased name; the name keeps its case.
- Deleting a role deletes its inline policies and attachments in the same transaction (the API refuses while any
  remain, as IAM does; the store does not leave orphans either way).
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

AGGREGATE = "iam"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "IAM roles, their inline policies and attached managed policies",
        (
            """CREATE TABLE iam_roles (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL,
                name_key TEXT NOT NULL UNIQUE,
                role_id TEXT NOT NULL,
                path TEXT NOT NULL,
                created REAL NOT NULL,
                trust_policy TEXT NOT NULL,
                description TEXT,
                max_session_s INTEGER NOT NULL,
                tags TEXT NOT NULL
            )""",
            """CREATE TABLE iam_role_policies (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                role_key TEXT NOT NULL,
                name TEXT NOT NULL,
                document TEXT NOT NULL,
                UNIQUE (role_key, name)
            )""",
            """CREATE TABLE iam_role_attachments (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                role_key TEXT NOT NULL,
                policy_arn TEXT NOT NULL,
                UNIQUE (role_key, policy_arn)
            )""",
        ),
    ),
)

_COLUMNS = "seq, name, role_id, path, created, trust_policy, description, max_session_s, tags"


@dataclass(frozen=True, slots=True)
class RoleRow:
    name: str
    role_id: str
    path: str
    created: float
    trust_policy: str  # the AssumeRolePolicyDocument as given (JSON text)
    description: str | None
    max_session_s: int
    tags: list[dict[str, str]]


def _role(r: Sequence[Any]) -> RoleRow:
    return RoleRow(r[1], r[2], r[3], float(r[4]), r[5], r[6], int(r[7]), orjson.loads(r[8]))


class RoleExists(ValueError):
    """A role of that name (in any case) exists."""


class Roles:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    def create(
        self,
        name: str,
        role_id: str,
        path: str,
        trust_policy: str,
        description: str | None,
        max_session_s: int,
        tags: Sequence[Mapping[str, str]],
    ) -> RoleRow:
        """The new role; :class:`RoleExists` when one of that name (in any case) is there."""
        now = self.clock()
        with transaction(self.conn) as c:
            if c.execute("SELECT 1 FROM iam_roles WHERE name_key = ?", (name.lower(),)).fetchone():
                raise RoleExists(name)
            c.execute(
                "INSERT INTO iam_roles (name, name_key, role_id, path, created, trust_policy, description, "
                "max_session_s, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, name.lower(), role_id, path, now, trust_policy, description, max_session_s,
                 orjson.dumps([dict(t) for t in tags]).decode()),
            )  # fmt: skip
        found = self.get(name)
        assert found is not None
        return found

    def get(self, name: str) -> RoleRow | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM iam_roles WHERE name_key = ?", (name.lower(),)).fetchone()
        return _role(row) if row else None

    def listed(self, path_prefix: str = "/") -> list[RoleRow]:
        """Every role whose path starts with ``path_prefix``, by name (IAM lists roles alphabetically)."""
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM iam_roles ORDER BY name_key").fetchall()
        return [r for r in map(_role, rows) if r.path.startswith(path_prefix)]

    def update(
        self,
        name: str,
        description: str | None = None,
        max_session_s: int | None = None,
        trust_policy: str | None = None,
    ) -> None:
        """Change what is given (not None) of the role ``name``."""
        sets = [(c, v) for c, v in (("description", description), ("max_session_s", max_session_s),
                                    ("trust_policy", trust_policy)) if v is not None]  # fmt: skip
        if not sets:
            return
        with transaction(self.conn) as c:
            c.execute(
                f"UPDATE iam_roles SET {', '.join(f'{col} = ?' for col, _ in sets)} WHERE name_key = ?",
                (*(v for _, v in sets), name.lower()),
            )

    def delete(self, name: str) -> bool:
        """Delete the role, its inline policies and attachments; False when there was none."""
        key = name.lower()
        with transaction(self.conn) as c:
            gone = c.execute("DELETE FROM iam_roles WHERE name_key = ?", (key,)).rowcount
            c.execute("DELETE FROM iam_role_policies WHERE role_key = ?", (key,))
            c.execute("DELETE FROM iam_role_attachments WHERE role_key = ?", (key,))
        return bool(gone)

    # ---- inline policies --------------------------------------------------------------------------------------
    def put_policy(self, role: str, name: str, document: str) -> None:
        """Add or replace the role's inline policy ``name`` (its JSON text)."""
        key = role.lower()
        with transaction(self.conn) as c:
            c.execute("DELETE FROM iam_role_policies WHERE role_key = ? AND name = ?", (key, name))
            c.execute(
                "INSERT INTO iam_role_policies (role_key, name, document) VALUES (?, ?, ?)", (key, name, document)
            )

    def get_policy(self, role: str, name: str) -> str | None:
        row = self.conn.execute(
            "SELECT document FROM iam_role_policies WHERE role_key = ? AND name = ?", (role.lower(), name)
        ).fetchone()
        return str(row[0]) if row else None

    def delete_policy(self, role: str, name: str) -> bool:
        with transaction(self.conn) as c:
            gone = c.execute(
                "DELETE FROM iam_role_policies WHERE role_key = ? AND name = ?", (role.lower(), name)
            ).rowcount
        return bool(gone)

    def policies(self, role: str) -> list[tuple[str, str]]:
        """The role's inline policies, ``(name, document)`` by name."""
        rows = self.conn.execute(
            "SELECT name, document FROM iam_role_policies WHERE role_key = ? ORDER BY name", (role.lower(),)
        ).fetchall()
        return [(str(n), str(d)) for n, d in rows]

    # ---- attached managed policies ---------------------------------------------------------------------------
    def attach(self, role: str, policy_arn: str) -> None:
        """Attach ``policy_arn`` (again: nothing changes, as IAM answers)."""
        key = role.lower()
        with transaction(self.conn) as c:
            if not c.execute(
                "SELECT 1 FROM iam_role_attachments WHERE role_key = ? AND policy_arn = ?", (key, policy_arn)
            ).fetchone():
                c.execute("INSERT INTO iam_role_attachments (role_key, policy_arn) VALUES (?, ?)", (key, policy_arn))

    def detach(self, role: str, policy_arn: str) -> bool:
        with transaction(self.conn) as c:
            gone = c.execute(
                "DELETE FROM iam_role_attachments WHERE role_key = ? AND policy_arn = ?", (role.lower(), policy_arn)
            ).rowcount
        return bool(gone)

    def attached(self, role: str) -> list[str]:
        """The ARNs of the role's attached policies, in the order they were attached."""
        rows = self.conn.execute(
            "SELECT policy_arn FROM iam_role_attachments WHERE role_key = ? ORDER BY seq", (role.lower(),)
        ).fetchall()
        return [str(r[0]) for r in rows]
