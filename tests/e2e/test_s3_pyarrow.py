"""pyarrow's own S3 client (the AWS SDK for C++, which reads no ``AWS_ENDPOINT_URL``) against a real ``servekit
up``, given the endpoint as docs/s3.md says (issue 46): a Parquet file written and read back, a listing. The
environment is what ``servekit env`` exports; the code is docs/s3.md's, run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
DOC = Path(__file__).resolve().parents[2] / "docs" / "s3.md"
MARKER = "<!-- pyarrow-example"


def test_pyarrow_s3_filesystem_reads_and_writes_the_planes_buckets(tmp_path: Path) -> None:
    match = re.search(re.escape(MARKER) + r"[^\n]*-->\n```python\n(.*?)\n```\n", DOC.read_text(), re.DOTALL)
    assert match, f"docs/s3.md must mark its pyarrow block with {MARKER!r}"
    up = UpProcess(tmp_path / "home")
    up.start()
    try:
        key = Credentials.load_or_create(up.home).admin
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{up.port}",
            AWS_ACCESS_KEY_ID=key.access_key_id,
            AWS_SECRET_ACCESS_KEY=key.secret_access_key,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",
        )
        script = tmp_path / "pyarrow_example.py"
        script.write_text(match.group(1) + "\n")
        run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr + up.log.read_text()[-2000:]
        assert run.stdout.splitlines()[-2:] == ["3", "['sagemaker-us-east-1-000000000000/tables/rows.parquet']"]
        body = up.client("s3").get_object(Bucket="sagemaker-us-east-1-000000000000", Key="tables/rows.parquet")["Body"]
        assert body.read()[:4] == b"PAR1"  # a real Parquet file, in the plane's own store
    finally:
        up.stop()
