"""What a job's script may do with the plane: its role's policy, as a SageMaker execution role decides it.

A job runs with a session key for its ``RoleArn`` (:class:`servekit.aws.sessions.SessionKeys`), never the home's
admin key. Its policy is, in order:

- the policy a user attached to the role's name: ``<home>/iam/roles/<RoleName>.json``, an IAM policy document
  (or a list of them) as AWS writes them, for instance::

      {"Version": "2012-10-17",
       "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
                      "Resource": ["arn:aws:s3:::my-data", "arn:aws:s3:::my-data/*"]}]}

- else the role's policies in IAM (:mod:`servekit.services.iam`: PutRolePolicy's inline policies and the AWS
  managed policies attached to it), when IAM has the role and it has at least one;
- else the default, what an execution role usually holds for a job (:func:`default_policy`): S3 on the buckets the
  job's request names and on those whose name holds ``sagemaker`` (as AmazonSageMakerFullAccess allows), CloudWatch
  metrics and logs, and SageMaker's Describe and List operations; none of the control plane's Create, Update,
  Delete or Stop operations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from servekit.aws.policy import VERSION, PolicyError, check

ROLES = Path("iam") / "roles"  # under the home
RoleDocuments = Callable[[str], Sequence[Mapping[str, Any]] | None]  # a role's name -> its policies in IAM
_BUCKET = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])")


def role_name(role_arn: str) -> str:
    return role_arn.rsplit("/", 1)[-1]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def request_buckets(request: Mapping[str, Any]) -> list[str]:
    """Every bucket an ``s3://`` URI anywhere in the job's request names (channels, outputs, checkpoints, the
    source directory in a hyperparameter, processing inputs and outputs)."""
    return sorted({m.group(1) for text in _strings(request) for m in _BUCKET.finditer(text)})


def default_policy(request: Mapping[str, Any]) -> dict[str, Any]:
    buckets = request_buckets(request)
    resources = [r for b in buckets for r in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")]
    resources += [f"arn:aws:s3:::*{word}*" for word in ("sagemaker", "SageMaker", "Sagemaker")]
    return {
        "Version": VERSION,
        "Statement": [
            {"Sid": "JobBuckets", "Effect": "Allow", "Action": "s3:*", "Resource": resources},
            {
                "Sid": "FindBuckets",
                "Effect": "Allow",
                "Action": ["s3:ListAllMyBuckets", "s3:GetBucketLocation"],
                "Resource": "*",
            },
            {
                "Sid": "MetricsAndLogs",
                "Effect": "Allow",
                "Action": [
                    "cloudwatch:PutMetricData",
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "logs:DescribeLogStreams",
                    "logs:GetLogEvents",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ReadSageMaker",
                "Effect": "Allow",
                "Action": ["sagemaker:Describe*", "sagemaker:List*"],
                "Resource": "*",
            },
        ],
    }


def role_policy(
    home: Path, role_arn: str, request: Mapping[str, Any], iam: RoleDocuments | None = None
) -> list[Mapping[str, Any]]:
    """The policy documents of the job's role (see the module's text); :class:`PolicyError` for a file that is
    not one servekit evaluates as written. ``iam``: the role's policies in IAM by its name (None: IAM has no such
    role; empty: it has no policy)."""
    path = home / ROLES / f"{role_name(role_arn)}.json"
    if not path.is_file():
        held = iam(role_name(role_arn)) if iam is not None else None
        return list(held) if held else [default_policy(request)]
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{path}: {exc}") from None
    docs = doc if isinstance(doc, list) else [doc]
    try:
        return [check(d) for d in docs]
    except PolicyError as exc:
        raise PolicyError(f"{path}: {exc}") from None
