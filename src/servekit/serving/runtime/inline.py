"""Which requests run on the event loop itself instead of on a model thread.

Handing a request to a model thread and back costs more than a small model's own run: the queue, the thread's
wake-up, ``call_soon_threadsafe``, the future, and the GIL passed back and forth between the loop and up to
``--num_inference_threads`` threads (measured here with wrk at c=64 on ``servekit serve``: a 4-feature logistic
regression, ~11 us in onnxruntime, answered 1.3-1.9x more one-row requests per second run on the loop). The loop's
CPU is what bounds a server's request rate, so a request whose model run has been measured shorter than the limit
(``--inline_run_limit_micros``, 50 us by default) runs at once on the loop. Batch queues keep every
batch on the batch threads: tried for a batch released because the model was idle, running it on the loop
left the queue idle for the next request too, so under load every request ran as a batch of one and the loop's
CPU per request doubled (``benchmarks/app_cpu_bench.py --model tiny --batching``: 62-70 -> 101-145 us).

Only servables of native frameworks that compute and nothing else run inline: those that declare they release
the GIL while computing (onnxruntime, TensorFlow, torch, XGBoost, LightGBM; ``runtime.base.Concurrency``). A
Python model (``inference.py``) may wait on a network or a lock inside ``predict``, which must never happen on the
loop, so it always runs on a thread.

The estimate is kept per model version, signature and size class of the request (its input elements rounded down
to a power of two: a model cheap for one row may not be for 4,096, nor a sequence model for 4,096 tokens):

- Runs on the threads are timed on the thread, around the model call only. A thread may wait there for the GIL
  (up to the 5 ms switch interval when the loop is busy), which only makes a run look slower, so the estimate is
  the fastest of them; after ``MIN_RUNS`` runs at or under the limit, the class runs inline.
- Runs inline are timed too, in wall time, which on a busy machine says as much about the machine as about the
  model: the loop thread may be descheduled mid-run, or wait for the GIL that another thread took while
  onnxruntime had released it (a 10 us model's inline runs in a server at c=64 here took 20-26 us at the median
  and 80-200 us at p99 on a quiet machine, and a median over 50 us with other work on both cores). So a class
  leaves the loop only when its runs are clearly slower than it came in for: when the share of runs over
  ``OVERRUN`` times the limit, an exponential average, passes one half (22 such runs in a row do it, or more than
  half of them for a while). It then goes back to the threads and is measured again after ``RETRY_AFTER``
  requests, doubling with each return: a model whose runs turn slow blocks the loop for a few dozen runs, then
  seldom.

The decision and the update are pure functions of the measured seconds, so tests drive them with numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_RUNS = 16  # thread runs before a class may run inline
OVERRUN = 4.0  # an inline run over this many times the limit counts as slow
SLOW_WEIGHT = 1 / 32  # weight of the newest inline run in the share of slow ones
SLOW_SHARE = 0.5  # inlining ends when the share of slow runs passes this
RETRY_AFTER = 1024  # requests on the threads after the first return, before measuring again; doubles each time
MAX_BACKOFF_SHIFT = 10


@dataclass(slots=True)
class RunCost:
    """What the runs of one size class of one signature cost, and where its next request runs."""

    runs: int = 0  # thread runs measured since the last (re)start
    fastest: float = float("inf")  # the fastest of those runs, in seconds
    inline: bool = False
    slow: float = 0.0  # inline: the recent share of runs over OVERRUN x the limit (an exponential average)
    wait: int = 0  # requests still to send to the threads before measuring again
    returns: int = 0  # times inlining ended on a slow run


def size_class(elements: int) -> int:
    """Requests whose input element counts share a power of two share an estimate."""
    return elements.bit_length()


def runs_inline(cost: RunCost, limit_s: float) -> bool:
    return cost.inline and limit_s > 0


def observe(cost: RunCost, seconds: float, inline: bool, limit_s: float) -> None:
    """Record one run of ``seconds`` (on the loop when ``inline``) and decide where the next one runs."""
    if inline:
        cost.slow += SLOW_WEIGHT * ((seconds > OVERRUN * limit_s) - cost.slow)
        if cost.slow > SLOW_SHARE:
            cost.inline = False
            cost.returns += 1
            cost.wait = RETRY_AFTER << min(cost.returns - 1, MAX_BACKOFF_SHIFT)
            cost.runs, cost.fastest, cost.slow = 0, float("inf"), 0.0
        return
    if cost.wait > 0:
        cost.wait -= 1
        return
    cost.runs += 1
    cost.fastest = min(cost.fastest, seconds)
    if cost.runs >= MIN_RUNS and cost.fastest <= limit_s and limit_s > 0:
        cost.inline = True
