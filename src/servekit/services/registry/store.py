"""The model registry aggregate: model package groups, model packages (versioned within a group, or unversioned)
and each package's events (approval changes with who, when and why; deployments made on approval).

The repository stores what it is given: approval statuses are text, and which changes are legal belongs to
``servekit.services.registry.approval`` above it. What it does guarantee:

- **Names are unique ignoring case** (groups among groups, unversioned packages among unversioned packages), as
  SageMaker lowercases them in ARNs; rows keep the spelling they were created with.
- **Versions are 1, 2, 3, … per group and never reused**: the next number lives on the group row and only grows,
  so a deleted version's number is not handed out again.
- **An approval change is compare-and-set** (``expected``) and commits together with its event row, so two
  callers cannot both move a package out of the same status and every change has its history.
- **Nothing is deleted by the repository on its own**: only an explicit ``delete_package``/``delete_group``
  removes a row; a group with packages refuses deletion (:class:`GroupNotEmpty`). Events outlive their package.
- **Time comes from the injected clock** (``clock``, seconds since the epoch).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration
from servekit.state.paging import Listing, Page, keyset_page, page_of, where_set

AGGREGATE = "registry"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "Model package groups, model packages and their approval/deployment events",
        (
            """CREATE TABLE registry_groups (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                description TEXT NOT NULL DEFAULT '',
                tags TEXT NOT NULL DEFAULT '[]',
                created_by TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                next_version INTEGER NOT NULL DEFAULT 1
            )""",
            "CREATE INDEX registry_groups_created ON registry_groups (created)",
            """CREATE TABLE registry_packages (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                arn TEXT NOT NULL UNIQUE COLLATE NOCASE,
                name TEXT NOT NULL COLLATE NOCASE,
                group_name TEXT COLLATE NOCASE,
                version INTEGER,
                approval TEXT,
                approval_description TEXT NOT NULL DEFAULT '',
                record TEXT NOT NULL,
                created_by TEXT NOT NULL DEFAULT '',
                modified_by TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                modified REAL NOT NULL
            )""",
            "CREATE UNIQUE INDEX registry_packages_version ON registry_packages (group_name, version)",
            # unversioned packages are unique by name (versioned ones share their group's name)
            "CREATE UNIQUE INDEX registry_packages_unversioned ON registry_packages (name) WHERE group_name IS NULL",
            "CREATE INDEX registry_packages_created ON registry_packages (created)",
            """CREATE TABLE registry_events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                package_arn TEXT NOT NULL COLLATE NOCASE,
                kind TEXT NOT NULL,
                at REAL NOT NULL,
                actor TEXT NOT NULL DEFAULT '',
                from_status TEXT,
                to_status TEXT,
                reason TEXT NOT NULL DEFAULT '',
                detail TEXT NOT NULL DEFAULT '{}'
            )""",
            "CREATE INDEX registry_events_package ON registry_events (package_arn, seq)",
        ),
    ),
)

_GROUP_COLUMNS = "seq, name, arn, description, tags, created_by, created, next_version"
_PACKAGE_COLUMNS = (
    "seq, arn, name, group_name, version, approval, approval_description, record, created_by, modified_by, "
    "created, modified"
)
_SORT = {"Name": "name", "CreationTime": "created"}


class RegistryStateError(Exception):
    """Base of the registry repository's refusals."""


class AlreadyExists(RegistryStateError):
    """A group (or an unversioned package) of that name exists (names compare ignoring case)."""


class NotFound(RegistryStateError):
    """The group or package named does not exist."""


class GroupNotEmpty(RegistryStateError):
    """A group that still holds packages cannot be deleted."""


class StaleApproval(RegistryStateError):
    """An approval change expected the package in a status it is no longer in."""

    def __init__(self, arn: str, actual: str | None) -> None:
        super().__init__(f"model package {arn} is {actual} now")
        self.actual = actual


@dataclass(frozen=True, slots=True)
class GroupRow:
    name: str
    arn: str
    description: str
    tags: list[dict[str, str]]  # [{"Key", "Value"}], as SageMaker's Tags
    created_by: str
    created: float
    next_version: int


@dataclass(frozen=True, slots=True)
class PackageRow:
    arn: str
    name: str
    group_name: str | None  # None: an unversioned package
    version: int | None
    approval: str | None  # ModelApprovalStatus (versioned packages only)
    approval_description: str
    record: dict[str, Any]  # the request's members as stored (InferenceSpecification, ModelMetrics, …)
    created_by: str
    modified_by: str
    created: float
    modified: float


@dataclass(frozen=True, slots=True)
class EventRow:
    """One thing that happened to a package: ``kind`` ``approval`` (``from_status`` → ``to_status``, ``reason``
    the ApprovalDescription) or ``deployment`` (``detail`` says what was deployed where, and how it went)."""

    package_arn: str
    kind: str
    at: float
    actor: str
    from_status: str | None
    to_status: str | None
    reason: str
    detail: dict[str, Any]


def _group(r: Sequence[Any]) -> GroupRow:
    return GroupRow(r[1], r[2], r[3], orjson.loads(r[4]), r[5], r[6], int(r[7]))


def _package(r: Sequence[Any]) -> PackageRow:
    return PackageRow(
        arn=r[1],
        name=r[2],
        group_name=r[3],
        version=r[4],
        approval=r[5],
        approval_description=r[6],
        record=orjson.loads(r[7]),
        created_by=r[8],
        modified_by=r[9],
        created=r[10],
        modified=r[11],
    )


def _event(r: Sequence[Any]) -> EventRow:
    return EventRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], orjson.loads(r[7]))


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


class Registry:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    # ---- groups --------------------------------------------------------------------------------------------------
    def create_group(
        self, name: str, arn: str, description: str = "", tags: Sequence[Mapping[str, str]] = (), created_by: str = ""
    ) -> GroupRow:
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO registry_groups (name, arn, description, tags, created_by, created) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (name, arn, description, _json([dict(t) for t in tags]), created_by, self._clock()),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(name) from None
        row = self.get_group(name)
        assert row is not None
        return row

    def get_group(self, name: str) -> GroupRow | None:
        r = self._db.execute(f"SELECT {_GROUP_COLUMNS} FROM registry_groups WHERE name = ?", (name,)).fetchone()
        return _group(r) if r else None

    def set_group_tags(self, name: str, tags: Sequence[Mapping[str, str]]) -> None:
        with transaction(self._db):
            cur = self._db.execute(
                "UPDATE registry_groups SET tags = ? WHERE name = ?", (_json([dict(t) for t in tags]), name)
            )
            if cur.rowcount == 0:
                raise NotFound(name)

    def delete_group(self, name: str) -> None:
        """Remove an empty group; :class:`GroupNotEmpty` while it holds packages, :class:`NotFound` if absent."""
        with transaction(self._db):
            if self._db.execute("SELECT 1 FROM registry_groups WHERE name = ?", (name,)).fetchone() is None:
                raise NotFound(name)
            held = self._db.execute("SELECT COUNT(*) FROM registry_packages WHERE group_name = ?", (name,)).fetchone()
            if held[0]:
                raise GroupNotEmpty(f"{name} holds {held[0]} model package(s)")
            self._db.execute("DELETE FROM registry_groups WHERE name = ?", (name,))

    def list_groups(
        self,
        *,
        name_contains: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[GroupRow]:
        """One page; ``ValueError`` (``InvalidNextToken`` among them) for a bad sort, size or token."""
        where, args = where_set(
            ("instr(lower(name), lower(?)) > 0", name_contains),
            ("created > ?", created_after),
            ("created < ?", created_before),
        )
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "registry_groups", _GROUP_COLUMNS, _SORT, listing), _group)

    # ---- packages ------------------------------------------------------------------------------------------------
    def create_version(
        self,
        group: str,
        arn_of: Callable[[str, int], str],
        approval: str,
        record: Mapping[str, Any],
        actor: str = "",
    ) -> PackageRow:
        """The group's next version (its ARN from ``arn_of(group name as created, version)``), with its first
        approval event (``None`` → ``approval``, reason "created"), in one transaction."""
        now = self._clock()
        with transaction(self._db):
            r = self._db.execute("SELECT name, next_version FROM registry_groups WHERE name = ?", (group,)).fetchone()
            if r is None:
                raise NotFound(group)
            name, version = str(r[0]), int(r[1])
            arn = arn_of(name, version)
            self._db.execute("UPDATE registry_groups SET next_version = ? WHERE name = ?", (version + 1, name))
            self._db.execute(
                "INSERT INTO registry_packages (arn, name, group_name, version, approval, record, created_by, "
                "modified_by, created, modified) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (arn, name, name, version, approval, _json(dict(record)), actor, actor, now, now),
            )
            self._insert_event(arn, "approval", now, actor, None, approval, "created")
        row = self.get(arn)
        assert row is not None
        return row

    def create_unversioned(self, name: str, arn: str, record: Mapping[str, Any], actor: str = "") -> PackageRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO registry_packages (arn, name, record, created_by, modified_by, created, modified) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (arn, name, _json(dict(record)), actor, actor, now, now),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(name) from None
        row = self.get(arn)
        assert row is not None
        return row

    def get(self, arn: str) -> PackageRow | None:
        r = self._db.execute(f"SELECT {_PACKAGE_COLUMNS} FROM registry_packages WHERE arn = ?", (arn,)).fetchone()
        return _package(r) if r else None

    def get_version(self, group: str, version: int) -> PackageRow | None:
        r = self._db.execute(
            f"SELECT {_PACKAGE_COLUMNS} FROM registry_packages WHERE group_name = ? AND version = ?", (group, version)
        ).fetchone()
        return _package(r) if r else None

    def get_unversioned(self, name: str) -> PackageRow | None:
        r = self._db.execute(
            f"SELECT {_PACKAGE_COLUMNS} FROM registry_packages WHERE group_name IS NULL AND name = ?", (name,)
        ).fetchone()
        return _package(r) if r else None

    def set_approval(
        self, arn: str, *, expected: str | None, to: str, actor: str, reason: str, record: Mapping[str, Any] | None
    ) -> PackageRow:
        """Compare-and-set the approval status (:class:`StaleApproval` when it is no longer ``expected``), with its
        event; ``record`` (when given) replaces the stored members too. ``expected == to`` records no event."""
        now = self._clock()
        with transaction(self._db):
            r = self._db.execute("SELECT approval FROM registry_packages WHERE arn = ?", (arn,)).fetchone()
            if r is None:
                raise NotFound(arn)
            if r[0] != expected:
                raise StaleApproval(arn, r[0])
            self._db.execute(
                "UPDATE registry_packages SET approval = ?, approval_description = ?, modified_by = ?, modified = ?, "
                "record = COALESCE(?, record) WHERE arn = ?",
                (to, reason, actor, now, None if record is None else _json(dict(record)), arn),
            )
            if expected != to:
                self._insert_event(arn, "approval", now, actor, expected, to, reason)
        row = self.get(arn)
        assert row is not None
        return row

    def set_record(self, arn: str, record: Mapping[str, Any], actor: str) -> None:
        with transaction(self._db):
            cur = self._db.execute(
                "UPDATE registry_packages SET record = ?, modified_by = ?, modified = ? WHERE arn = ?",
                (_json(dict(record)), actor, self._clock(), arn),
            )
            if cur.rowcount == 0:
                raise NotFound(arn)

    def delete_package(self, arn: str) -> None:
        """Remove one package (an explicit DeleteModelPackage); its events stay."""
        with transaction(self._db):
            if self._db.execute("DELETE FROM registry_packages WHERE arn = ?", (arn,)).rowcount == 0:
                raise NotFound(arn)

    def list_packages(
        self,
        *,
        group: str | None = None,
        versioned: bool | None = None,
        approval: str | None = None,
        name_contains: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Ascending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[PackageRow]:
        """One page of packages: of ``group``, or of one kind (``versioned`` True/False; None: both)."""
        where, args = where_set(
            ("group_name = ?", group),
            ("approval = ?", approval),
            ("instr(lower(name), lower(?)) > 0", name_contains),
            ("created > ?", created_after),
            ("created < ?", created_before),
        )
        if versioned is not None:
            where = (*where, "group_name IS NOT NULL" if versioned else "group_name IS NULL")
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "registry_packages", _PACKAGE_COLUMNS, _SORT, listing), _package)

    # ---- events --------------------------------------------------------------------------------------------------
    def add_event(
        self, arn: str, kind: str, actor: str, detail: Mapping[str, Any], reason: str = "", to_status: str | None = None
    ) -> None:
        with transaction(self._db):
            self._insert_event(arn, kind, self._clock(), actor, None, to_status, reason, detail)

    def events(self, arn: str, kind: str | None = None) -> list[EventRow]:
        """A package's events, oldest first."""
        sql = (
            "SELECT package_arn, kind, at, actor, from_status, to_status, reason, detail FROM registry_events "
            "WHERE package_arn = ?" + (" AND kind = ?" if kind else "") + " ORDER BY seq"
        )
        return [_event(r) for r in self._db.execute(sql, (arn, kind) if kind else (arn,))]

    def _insert_event(
        self,
        arn: str,
        kind: str,
        at: float,
        actor: str,
        from_status: str | None,
        to_status: str | None,
        reason: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        self._db.execute(
            "INSERT INTO registry_events (package_arn, kind, at, actor, from_status, to_status, reason, detail) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (arn, kind, at, actor, from_status, to_status, reason, _json(dict(detail or {}))),
        )


__all__ = [
    "AGGREGATE",
    "MIGRATIONS",
    "AlreadyExists",
    "EventRow",
    "GroupNotEmpty",
    "GroupRow",
    "NotFound",
    "PackageRow",
    "Registry",
    "RegistryStateError",
    "StaleApproval",
]
