"""servekit up's log sources (servekit.launch.logs): every instance of every endpoint, the fleets of a deployment
under way included, and the transform jobs the API started that run or ended lately."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from servekit.launch.logs import endpoint_sources, transform_instance_id, transform_sources
from servekit.services.database import StateDB
from servekit.services.logs.shipper import LogSource


def fleet(variant: str, *ids: str) -> Any:
    instances = [SimpleNamespace(handle=SimpleNamespace(log_path=f"/logs/{i}.log", spec=SimpleNamespace(instance_id=i)))
                 for i in ids]  # fmt: skip
    return SimpleNamespace(plan=SimpleNamespace(name=variant), instances=instances)


def test_every_instance_of_every_endpoint_goes_to_its_group() -> None:
    live = fleet("AllTraffic", "ep-AllTraffic-1")
    green = fleet("AllTraffic", "ep-AllTraffic-2")
    controllers: Any = {
        "ep": SimpleNamespace(fleets={"AllTraffic": live}, deployment=SimpleNamespace(fleets={"AllTraffic": green})),
        "other": SimpleNamespace(fleets={"B": fleet("B", "other-B-1")}, deployment=None),
    }
    assert endpoint_sources(controllers) == [
        LogSource("/aws/sagemaker/Endpoints/ep", "AllTraffic/ep-AllTraffic-1", "/logs/ep-AllTraffic-1.log"),
        LogSource("/aws/sagemaker/Endpoints/ep", "AllTraffic/ep-AllTraffic-2", "/logs/ep-AllTraffic-2.log"),
        LogSource("/aws/sagemaker/Endpoints/other", "B/other-B-1", "/logs/other-B-1.log"),
    ]


def test_running_transform_jobs_are_followed(tmp_path: Path) -> None:
    with StateDB.open(tmp_path / "home") as db:
        for name, status in (("a", "InProgress"), ("b", "Completed"), ("c", "Stopping"), ("d", "Completed")):
            db.transform_jobs.insert(name, {}, status, created=1.0, owner_pid=1, owner_host="h", engine="local")
        db.transform_jobs.set_status("b", "Completed", reason="", ended=1000.0)
        db.transform_jobs.set_status("d", "Completed", reason="", ended=1000.0 - 301)
        sources = transform_sources(db.transform_jobs, tmp_path / "home", lambda: 1000.0)()
    folder = tmp_path / "home" / "transform" / "api"
    group = "/aws/sagemaker/TransformJobs"
    expected = []
    for job in ("a", "b", "c"):  # running, or ended in the last five minutes (b: a job shorter than a pass)
        stream = f"{job}/{transform_instance_id(job)}"
        expected.append(LogSource(group, stream, str(folder / f"{job}.log")))
        data_log = tmp_path / "home" / "transform" / "data-logs" / f"{job}.log"
        expected.append(LogSource(group, f"{stream}/data-log", str(data_log)))  # SageMaker's data-log stream
    assert sources == expected
    assert transform_instance_id("a") == transform_instance_id("a") != transform_instance_id("c")
    assert len(transform_instance_id("a")) == 19 and transform_instance_id("a").startswith("i-")
