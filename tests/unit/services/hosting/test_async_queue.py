"""InvokeEndpointAsync's durable queue: oldest first per endpoint, claimed once, put back by a restarted plane,
counted as the backlog while queued or running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.database import StateDB


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    state = StateDB.open(tmp_path)
    yield state
    state.conn.close()


def test_the_queue_is_oldest_first_claimed_once_and_requeued_after_a_restart(db: StateDB) -> None:
    q = db.async_invocations
    a = q.add("a", "ep", {"InputLocation": "s3://b/a"}, ttl_s=60)
    b = q.add("b", "ep", {"InputLocation": "s3://b/b"}, ttl_s=60)
    q.add("c", "other", {}, ttl_s=60)
    assert [r.inference_id for r in q.queued("ep", 10)] == ["a", "b"]
    assert q.queued("ep", 1)[0].request == {"InputLocation": "s3://b/a"}
    assert b.expires - b.created == 60
    assert q.claim(a.seq) and not q.claim(a.seq)  # one taker only
    assert [r.inference_id for r in q.queued("ep", 10)] == ["b"]
    assert q.backlog() == {"ep": 2, "other": 1}  # running counts as backlog
    assert q.requeue_running() == 1  # a restarted plane: what was running goes back
    assert [r.inference_id for r in q.queued("ep", 10)] == ["a", "b"]
    assert q.claim(a.seq)
    q.finish(a.seq, "Completed")
    q.claim(b.seq)
    q.finish(b.seq, "Failed", "the model raised")
    assert q.backlog() == {"other": 1}
    done = q.get(b.seq)
    assert done is not None and done.status == "Failed" and done.error == "the model raised"


def test_a_released_request_goes_back_to_its_place_in_the_queue(db: StateDB) -> None:
    """A variant that scaled to zero under a taken request: released, it is queued again ahead of newer ones."""
    q = db.async_invocations
    a = q.add("a", "ep", {}, ttl_s=60)
    q.add("b", "ep", {}, ttl_s=60)
    assert q.claim(a.seq)
    q.release(a.seq)
    assert [r.inference_id for r in q.queued("ep", 10)] == ["a", "b"]
    assert q.backlog() == {"ep": 2}
    q.claim(a.seq)
    q.finish(a.seq, "Completed")
    q.release(a.seq)  # only a running request goes back: a finished one stays finished
    done = q.get(a.seq)
    assert done is not None and done.status == "Completed"
