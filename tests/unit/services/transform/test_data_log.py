"""The batch agent's data log (a transform job's data-log stream): a stamped line per object and note, appended."""

from __future__ import annotations

from pathlib import Path

from servekit.services.transform.object_runner import ObjectResult
from servekit.services.transform.progress import DataLog, NullProgress, Tee, data_log_path
from servekit.services.transform.status import ObjectStatus


def test_lines_are_stamped_and_a_resumed_job_appends(tmp_path: Path) -> None:
    path = data_log_path(tmp_path, "job-1")
    log = DataLog(path, clock=lambda: 0.0)
    sink = Tee(NullProgress(), log)
    sink.start("job-1", 2, 0, 10)
    sink.object_done(ObjectResult("a.csv", ObjectStatus.DONE, records=3))
    sink.object_done(ObjectResult("b.csv", ObjectStatus.FAILED, message="instance 0 died"))
    sink.note("stopping")
    sink.close()
    again = DataLog(path, clock=lambda: 60.0)
    again.note("resumed")
    again.close()
    assert path.read_text().splitlines() == [
        "1970-01-01T00:00:00.000:[sagemaker logs]: job job-1: 2 object(s), 0 already done, 10 bytes to read",
        "1970-01-01T00:00:00.000:[sagemaker logs]: a.csv: Done, 3 record(s), 0 error(s)",
        "1970-01-01T00:00:00.000:[sagemaker logs]: b.csv: Failed, 0 record(s), 0 error(s): instance 0 died",
        "1970-01-01T00:00:00.000:[sagemaker logs]: stopping",
        "1970-01-01T00:01:00.000:[sagemaker logs]: resumed",
    ]
