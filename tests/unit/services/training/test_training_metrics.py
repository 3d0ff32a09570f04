"""Metrics from a growing log: complete lines only until the end, a UTF-8 character split across reads, each match
sent once with the time it was read."""

from __future__ import annotations

from pathlib import Path

from servekit.services.training.metrics import LogLines, MetricFollower, metric_values, regex_problem


def test_values_lines_and_the_follower(tmp_path: Path) -> None:
    assert metric_values(r"loss=([-0-9.e]+)", "loss=1.5 loss=abc loss=-2e-1") == [1.5, -0.2]
    assert metric_values(r"loss=[0-9]+", "loss=12") == []  # no group: the whole match, not a number
    assert metric_values(r"loss=(", "loss=1") == []  # a broken regex matches nothing
    assert metric_values(r"[0-9]\.[0-9]", "a 0.9 b 0.5\r\n") == [0.9, 0.5]
    assert regex_problem("(") is not None and regex_problem(r"a=(\d+)") is None

    log = tmp_path / "algo-1.log"
    lines = LogLines(log)
    assert lines.read() == ""  # not there yet
    log.write_bytes("épo".encode()[:1])  # half of a two-byte character
    assert lines.read() == ""
    with log.open("ab") as f:
        f.write("épo".encode()[1:] + b"ch 1 loss=0.5\nepoch 2 lo")
    assert lines.read() == "époch 1 loss=0.5\n"
    assert lines.read(final=True) == "epoch 2 lo"

    sent: list[tuple[str, str, float, float]] = []
    log2 = tmp_path / "algo-2.log"
    log2.write_text("loss=0.9\nacc=0.1\nloss=0.8")
    follower = MetricFollower(
        "job-1",
        [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}, {"Name": "bad", "Regex": "("}],
        [log2],
        lambda *point: sent.append(point),
    )
    assert follower.read(10.0) == 1 and sent == [("job-1", "loss", 0.9, 10.0)]
    assert follower.read(11.0) == 0  # the last line is not complete yet
    assert follower.read(12.0, final=True) == 1 and sent[-1] == ("job-1", "loss", 0.8, 12.0)
