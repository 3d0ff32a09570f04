"""Response streaming on servekit up: time to the first byte against time to the whole answer, in one run.

    python benchmarks/streaming_bench.py [--pieces 20] [--piece-ms 50] [--rounds 5]

A handler yields --pieces pieces, each after --piece-ms of work (a sleep standing in for a token's compute), on an
endpoint of one instance. Measured with boto3 from the client: InvokeEndpointWithResponseStream's first
PayloadPart and its last, against InvokeEndpoint's whole answer for the same request (which waits for every piece).
The model's own time is pieces x piece-ms; the first part can come no sooner than one piece. Median of --rounds.
Only loopback is used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

from servekit.testing.hosting import UpProcess

HANDLER = """
import json, time

def model_fn(model_dir):
    return None

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, model):
    for i in range(data["pieces"]):
        time.sleep(data["piece_ms"] / 1000)
        yield i

def output_fn(piece, accept):
    return json.dumps({"token": piece}) + "\\n", "application/jsonlines"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pieces", type=int, default=20)
    parser.add_argument("--piece-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code = root / "tokens" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        up = UpProcess(root / "home")
        up.start()
        try:
            sm, rt = up.sm(), up.rt()
            sm.create_model(ModelName="t", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(root / "tokens")})
            variant = {"VariantName": "A", "ModelName": "t", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
            sm.create_endpoint_config(EndpointConfigName="t", ProductionVariants=[variant])
            sm.create_endpoint(EndpointName="t", EndpointConfigName="t")
            sm.get_waiter("endpoint_in_service").wait(EndpointName="t", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
            body = json.dumps({"pieces": args.pieces, "piece_ms": args.piece_ms})
            first, last, whole = [], [], []
            for _ in range(args.rounds + 1):  # the first round warms up
                t0 = time.perf_counter()
                answer = rt.invoke_endpoint_with_response_stream(
                    EndpointName="t", Body=body, ContentType="application/json"
                )
                got = b""
                t_first = None
                for event in answer["Body"]:
                    if t_first is None:
                        t_first = time.perf_counter() - t0
                    got += event["PayloadPart"]["Bytes"]
                t_last = time.perf_counter() - t0
                assert len(got.splitlines()) == args.pieces, got
                t0 = time.perf_counter()
                rt.invoke_endpoint(EndpointName="t", Body=body, ContentType="application/json")["Body"].read()
                whole.append(time.perf_counter() - t0)
                first.append(t_first or t_last)
                last.append(t_last)
        finally:
            up.stop()
    model_ms = args.pieces * args.piece_ms
    f, la, w = (statistics.median(x[1:]) * 1000 for x in (first, last, whole))
    print(f"{args.pieces} pieces x {args.piece_ms:g} ms (model time {model_ms:g} ms), median of {args.rounds}:")
    print(f"  streamed: first part {f:.1f} ms, last part {la:.1f} ms")
    print(f"  InvokeEndpoint: whole answer {w:.1f} ms")
    print(
        f"  first byte / whole answer: {f / w:.3f}   (one piece is {args.piece_ms / model_ms:.3f} of the model's time)"
    )


if __name__ == "__main__":
    main()
