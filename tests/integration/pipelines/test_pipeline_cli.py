"""``servekit pipeline ...`` and ``servekit lineage`` on a YAML pipeline with a command step and a function step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from servekit.cli.main import app


def test_yaml_pipeline_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / "steps.py").write_text(
        "def count(ctx, data):\n"
        "    text = ctx.read(ctx.storage.join(data, 'words.txt')).decode()\n"
        "    ctx.write('counts', 'n.txt', str(len(text.split())).encode())\n"
        "    return {'words': len(text.split())}\n"
    )
    writer = (
        "import os, sys; open(os.path.join(os.environ['SERVEKIT_OUTPUT_OUT'], 'words.txt'), 'w').write(sys.argv[1])"
    )
    (tmp_path / "p.yaml").write_text(
        json.dumps(
            {
                "Name": "words",
                "Parameters": [{"Name": "Text", "Type": "String", "DefaultValue": "a b c"}],
                "Steps": [
                    {
                        "Name": "write",
                        "Type": "Processing",
                        "Command": [sys.executable, "-c", writer, {"Get": "Parameters.Text"}],
                        "Outputs": ["out"],
                    },
                    {
                        "Name": "count",
                        "Type": "Processing",
                        "Function": "steps.py:count",
                        "Arguments": {"data": {"Get": "Steps.write.Outputs.out"}},
                        "Outputs": ["counts"],
                    },
                ],
            }
        )
    )
    home = tmp_path / "home"
    cli = CliRunner()
    base = ["--home", str(home)]
    done = cli.invoke(app, ["pipeline", "run", str(tmp_path / "p.yaml"), "--param", "Text=x y z w", "--json", *base])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    steps = {s["StepName"]: s for s in doc["Steps"]}
    assert steps["count"]["StepStatus"] == "Succeeded"
    counts = Path(steps["count"]["Outputs"]["counts"]["uri"]) / "n.txt"
    assert counts.read_text() == "4"
    assert str(counts).startswith(str(home / "artifacts" / "words" / doc["PipelineExecutionId"]))

    listed = cli.invoke(app, ["pipeline", "list", *base])
    assert doc["PipelineExecutionId"] in listed.stdout and "Succeeded" in listed.stdout
    described = cli.invoke(app, ["pipeline", "describe", doc["PipelineExecutionId"], *base])
    assert "count" in described.stdout and "attempts 1" in described.stdout

    sha = steps["write"]["Outputs"]["out"]["sha256"]
    traced = cli.invoke(app, ["lineage", sha, "--json", *base])
    assert traced.exit_code == 0, traced.output
    assert json.loads(traced.stdout)["artifact"]["step"] == "write"
    by_path = cli.invoke(app, ["lineage", str(counts), *base])
    assert "input data:" in by_path.stdout and f"sha256 {sha}" in by_path.stdout

    policy = cli.invoke(app, ["pipeline", "policy", "words", "--artifact-root", "s3://b/root", *base])
    assert policy.exit_code == 0, policy.output
    docs = json.loads(policy.stdout)
    assert docs["count"]["Statement"][1]["Resource"] == ["arn:aws:s3:::b/root/words/*/count/*"]

    stopped = cli.invoke(app, ["pipeline", "stop", doc["PipelineExecutionId"], *base])
    assert stopped.exit_code == 1 and "already Succeeded" in stopped.output
    bad = cli.invoke(app, ["pipeline", "run", str(tmp_path / "p.yaml"), "--param", "Nope=1", *base])
    assert bad.exit_code == 2 and "has no parameter(s) ['Nope']" in bad.output
    missing = cli.invoke(app, ["lineage", str(tmp_path / "nowhere"), *base])
    assert missing.exit_code == 1 and "is no artifact" in missing.output
