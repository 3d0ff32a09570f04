"""What a step's function is given: its storage handle (least privilege), its output folders and who it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.services.pipelines.access.guard import GuardedStorage


@dataclass(frozen=True)
class StepContext:
    pipeline: str
    run_id: str
    step: str
    attempt: int
    storage: GuardedStorage  # reads under the step's read prefixes, writes new files under its outputs only
    outputs: dict[str, str] = field(default_factory=dict)  # output name -> folder URI
    parameters: dict[str, Any] = field(default_factory=dict)  # the run's parameter values

    def output(self, name: str) -> str:
        """The folder URI of the declared output ``name``."""
        try:
            return self.outputs[name]
        except KeyError:
            raise KeyError(
                f"step {self.step!r} declares no output {name!r}; its outputs: {list(self.outputs)}"
            ) from None

    def write(self, output: str, key: str, data: bytes) -> str:
        """Write ``data`` as ``key`` inside the output folder ``output``; returns its URI."""
        uri = self.storage.join(self.output(output), key)
        self.storage.put(uri, data)
        return uri

    def read(self, uri: str) -> bytes:
        return self.storage.get(uri)

    def local_path(self, uri: str) -> Path:
        """A local path holding ``uri`` (read-checked), for libraries that open files themselves."""
        return self.storage.local_path(uri)
