"""Each SageMaker resource's tags, by ARN.

Guarantees:

- **One row per ARN, compared without regard to case** (SageMaker lowercases names in its ARNs; a caller may not).
- A resource created again under the same name starts with the tags of its new Create* request
  (:meth:`Tags.replace`), not the ones of the resource it replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration

AGGREGATE = "tags"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the tags of SageMaker's resources, by ARN",
        (
            """CREATE TABLE tags_by_arn (
                arn_key TEXT PRIMARY KEY,
                arn TEXT NOT NULL,
                tags TEXT NOT NULL
            )""",
        ),
    ),
)

Tag = dict[str, str]


class Tags:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, arn: str) -> list[Tag] | None:
        """The resource's tags in the order they were added; None for an ARN no Create* or AddTags recorded."""
        row = self.conn.execute("SELECT tags FROM tags_by_arn WHERE arn_key = ?", (arn.lower(),)).fetchone()
        return list(orjson.loads(row[0])) if row else None

    def replace(self, arn: str, tags: Sequence[Mapping[str, str]]) -> None:
        with transaction(self.conn) as c:
            c.execute(
                "INSERT INTO tags_by_arn (arn_key, arn, tags) VALUES (?, ?, ?) "
                "ON CONFLICT (arn_key) DO UPDATE SET arn = excluded.arn, tags = excluded.tags",
                (arn.lower(), arn, orjson.dumps([dict(t) for t in tags]).decode()),
            )

    def update(self, arn: str, change: Callable[[list[Tag]], list[Tag]]) -> list[Tag]:
        """The tags ``change`` makes of the resource's (none yet: an empty list), stored in one transaction (two
        AddTags at once both land); ``change`` may raise to store nothing."""
        with transaction(self.conn) as c:
            row = c.execute("SELECT tags FROM tags_by_arn WHERE arn_key = ?", (arn.lower(),)).fetchone()
            tags = change(list(orjson.loads(row[0])) if row else [])
            c.execute(
                "INSERT INTO tags_by_arn (arn_key, arn, tags) VALUES (?, ?, ?) "
                "ON CONFLICT (arn_key) DO UPDATE SET tags = excluded.tags",
                (arn.lower(), arn, orjson.dumps(tags).decode()),
            )
        return tags
