"""How a job reports progress: the sink protocol and a silent sink. Terminal displays live in the CLI."""

from __future__ import annotations

from typing import Protocol

from servekit.transform.object_runner import ObjectResult


class ProgressSink(Protocol):
    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None: ...

    def advance(self, records: int, nbytes: int) -> None: ...

    def object_done(self, result: ObjectResult) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    def start(self, name: str, objects_total: int, objects_skipped: int, bytes_todo: int) -> None:
        pass

    def advance(self, records: int, nbytes: int) -> None:
        pass

    def object_done(self, result: ObjectResult) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
