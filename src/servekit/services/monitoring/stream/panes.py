"""The pane store: the panes of a run's windowing, each kept only while a window can still use it.

Rows are folded into panes of ``gcd(window, step)`` seconds as they are read. A window ``[end - window, end)``
is finished once the source's *watermark* (no row still to come is older than it; see ``sources``) has reached
its end: it is handed out with its panes, in order, and every pane before the next window's start is released.
So memory depends on the window length, not on the time span read: at most ``window / pane`` panes plus those
the watermark has not passed yet. A row that arrives for a released pane is *late*: counted and left out.
Without a watermark (files in no time order) every pane is kept until the end, as the window range is only
known then.

The range of windows is ``[since, until)``; a bound not given is ``floor(first row, step)`` /
``floor(last row, step) + step``. The start is fixed when the first window is finished: every row still to come
is at or after the watermark, so none is older than the first row seen by then.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from servekit.services.monitoring.stream.windows import Window, pane_seconds

P = TypeVar("P")
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Finished(Generic[P]):
    window: Window
    panes: list[P]  # the window's panes that hold rows, oldest first


class PaneStore(Generic[P]):
    def __init__(
        self,
        window: int,
        step: int,
        new_pane: Callable[[], P],
        *,
        since: float | None = None,
        until: float | None = None,
        first_index: int = 0,
    ) -> None:
        if window <= 0 or step <= 0:
            raise ValueError("window and step must be > 0")
        self.window, self.step, self.pane = window, step, pane_seconds(window, step)
        self._new = new_pane
        self._since, self._until = since, until
        self._index = first_index
        self._panes: dict[int, P] = {}
        self._next_end: float | None = None  # end of the next window to finish, once the range start is fixed
        self.floor = -(2**62)  # panes below this were released
        self.first, self.last = math.inf, -math.inf
        self.late_rows = 0
        self.peak = 0  # most panes held at once

    @property
    def held(self) -> int:
        return len(self._panes)

    @property
    def since(self) -> float | None:
        return self._since if self._since is not None else self._start()

    def _start(self) -> float | None:
        return None if not math.isfinite(self.first) else math.floor(self.first / self.step) * self.step

    def admit(self, times: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.bool_], IntArray]:
        """Which rows (of known times) can still count, and their pane numbers; late rows are counted."""
        ids = np.floor(times / self.pane).astype(np.int64)
        ok = ids >= self.floor
        late = int((~ok).sum())
        self.late_rows += late
        if ok.any():
            kept = times[ok]
            self.first, self.last = min(self.first, float(kept.min())), max(self.last, float(kept.max()))
        return ok, ids

    def get(self, key: int) -> P:
        pane = self._panes.get(key)
        if pane is None:
            pane = self._panes[key] = self._new()
            self.peak = max(self.peak, len(self._panes))
        return pane

    def ready(self, watermark: float | None) -> Iterator[Finished[P]]:
        """The windows the watermark has passed (each once, oldest first), releasing panes no later window uses."""
        if watermark is None:
            return
        yield from self._emit(watermark)

    def finish(self) -> Iterator[Finished[P]]:
        """Every window left in the range, once all rows have been read."""
        until = self._until
        if until is None:
            if not math.isfinite(self.last):
                return
            until = (math.floor(self.last / self.step) + 1) * self.step
        yield from self._emit(until)

    def _emit(self, limit: float) -> Iterator[Finished[P]]:
        if self._next_end is None:
            since = self.since
            if since is None:
                return
            self._next_end = math.ceil((since + self.window) / self.step) * self.step
        if self._until is not None:
            limit = min(limit, self._until)
        while self._next_end <= limit:
            end = self._next_end
            start = end - self.window
            keys = range(int(start // self.pane), int(end // self.pane))
            panes = [p for k in keys if (p := self._panes.get(k)) is not None]
            yield Finished(Window(self._index, float(start), float(end)), panes)
            self._index += 1
            self._next_end = end + self.step
            self._release(int((self._next_end - self.window) // self.pane))

    def _release(self, floor: int) -> None:
        self.floor = max(self.floor, floor)
        for key in [k for k in self._panes if k < self.floor]:
            del self._panes[key]
