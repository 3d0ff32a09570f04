"""S3 on servekit up, side by side with the same bytes on local disk and with moto's S3 server, in one run.

    python benchmarks/s3_bench.py [--big-mb 100] [--rounds 3] [--small 300] [--no-moto]

For each size (1 MB and --big-mb MB) it times, with boto3 against each server on loopback:
PutObject (one request), GetObject (read to the end), and upload_file/download_file (the transfer manager:
multipart at 8 MB, threads); and on local disk: writing the bytes to a file with fsync (what a durable PUT costs)
and reading them back. Throughput is MB/s (best of --rounds); the ratio column is servekit against local disk.
Small objects (1 KiB): PUT+GET round trips per second, one client thread. Only loopback is used.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from servekit.aws import Credentials
from servekit.backends.local import free_port
from servekit.testing.hosting import UpProcess


def best(rounds: int, fn: Callable[[], None]) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def client(url: str, key: str, secret: str) -> Any:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"total_max_attempts": 1}),
    )


def start_moto(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return proc
        except OSError:
            time.sleep(0.2)  # another process starting
    proc.kill()
    raise RuntimeError("moto's server did not start")


def disk(data: bytes, work: Path, rounds: int) -> tuple[float, float]:
    path = work / "disk.bin"

    def write() -> None:
        with path.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def read() -> None:
        with path.open("rb") as f:
            while f.read(1 << 20):
                pass

    return best(rounds, write), best(rounds, read)


def server(s3: Any, data: bytes, work: Path, rounds: int, bucket: str) -> dict[str, float]:
    src = work / "src.bin"
    src.write_bytes(data)
    out: dict[str, float] = {}
    out["put"] = best(rounds, lambda: s3.put_object(Bucket=bucket, Key="obj", Body=data))
    out["get"] = best(rounds, lambda: s3.get_object(Bucket=bucket, Key="obj")["Body"].read())
    out["upload_file"] = best(rounds, lambda: s3.upload_file(str(src), bucket, "file"))
    out["download_file"] = best(rounds, lambda: s3.download_file(bucket, "file", str(work / "dl.bin")))
    return out


def small(s3: Any, bucket: str, n: int) -> float:
    body = b"x" * 1024
    t0 = time.perf_counter()
    for i in range(n):
        s3.put_object(Bucket=bucket, Key=f"small/{i}", Body=body)
        s3.get_object(Bucket=bucket, Key=f"small/{i}")["Body"].read()
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big-mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=300)
    ap.add_argument("--no-moto", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="s3-bench-"))
    up = UpProcess(work / "home")
    up.start()
    moto_port = free_port()
    moto = None if args.no_moto else start_moto(moto_port)
    try:
        key = Credentials.load_or_create(up.home).admin
        targets = {"servekit": client(up.url, key.access_key_id, key.secret_access_key)}
        if moto is not None:
            targets["moto"] = client(f"http://127.0.0.1:{moto_port}", "testing", "testing")
        for s3 in targets.values():
            s3.create_bucket(Bucket="bench")
        print(f"S3 bench: {os.cpu_count()} CPUs, best of {args.rounds}; MB/s (ratio = servekit / local disk)")
        for mb in (1, args.big_mb):
            data = os.urandom(mb * 2**20)
            w, r = disk(data, work, args.rounds)
            print(f"\n{mb} MB: local disk write+fsync {mb / w:8.1f} MB/s, read {mb / r:8.1f} MB/s")
            for name, s3 in targets.items():
                res = server(s3, data, work, args.rounds, "bench")
                cells = []
                for op, t in res.items():
                    base = w if op in ("put", "upload_file") else r
                    cells.append(f"{op} {mb / t:7.1f} MB/s ({base / t:4.2f}x disk)")
                print(f"  {name:9s} " + "  ".join(cells))
        print(f"\nsmall objects (1 KiB), PUT+GET round trips/s over {args.small}, one thread:")
        for name, s3 in targets.items():
            print(f"  {name:9s} {small(s3, 'bench', args.small):8.1f}")
    finally:
        up.stop()
        if moto is not None:
            moto.kill()
            moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
