"""Which instance holds which GPUs on this machine: each GPU instance gets its own cards, never shared."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from servekit.accelerators.inventory import Gpu


class GpuShortage(Exception):
    """Not enough free GPUs for an instance: the message carries the counts (an endpoint's FailureReason)."""

    def __init__(self, needed: int, total: int, free: int) -> None:
        self.needed, self.total, self.free = needed, total, free
        held = f" ({free} free)" if free != total else ""
        super().__init__(f"needs {needed} GPU{'s' if needed != 1 else ''}, this machine has {total}{held}")


def choose_gpus(indices: Sequence[int], held: set[int], wanted: int) -> tuple[int, ...] | None:
    """The lowest ``wanted`` indices of ``indices`` not in ``held`` (None when too few are free). Pure."""
    free = [i for i in sorted(indices) if i not in held]
    return tuple(free[:wanted]) if len(free) >= wanted else None


class GpuPool:
    """The machine's GPUs (``detect`` runs once, on the first demand) handed out whole to instances by id."""

    def __init__(self, detect: Callable[[], Sequence[Gpu]]) -> None:
        self._detect = detect
        self._gpus: tuple[Gpu, ...] | None = None
        self._held: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def gpus(self) -> tuple[Gpu, ...]:
        if self._gpus is None:
            self._gpus = tuple(self._detect())
        return self._gpus

    def acquire(self, owner: str, wanted: int) -> tuple[int, ...]:
        """``wanted`` free GPU indices for ``owner``; :class:`GpuShortage` when the machine lacks them."""
        with self._lock:
            indices = [g.index for g in self.gpus()]
            held = {i for devices in self._held.values() for i in devices}
            chosen = choose_gpus(indices, held, wanted)
            if chosen is None:
                raise GpuShortage(wanted, len(indices), len(indices) - len(held & set(indices)))
            self._held[owner] = chosen
            return chosen

    def release(self, owner: str) -> None:
        with self._lock:
            self._held.pop(owner, None)

    def held(self) -> dict[str, tuple[int, ...]]:
        with self._lock:
            return dict(self._held)
