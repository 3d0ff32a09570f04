"""AWS managed policies a role can have attached on servekit, each as a document servekit evaluates exactly.

AWS's own documents hold ``Condition`` blocks and actions of services servekit does not serve; these keep what the
policy means for the services on servekit's port (SageMaker, S3, CloudWatch and its Logs, STS, IAM), without
conditions. Attaching an AWS managed policy that is not here is refused (NoSuchEntity, as IAM refuses a policy that
does not exist), so an attachment never means less or more than servekit evaluates. docs/iam.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servekit.aws.policy import VERSION

PREFIX = "arn:aws:iam::aws:policy/"
_SAGEMAKER_BUCKETS = [
    f"arn:aws:s3:::*{word}*" for word in ("sagemaker", "SageMaker", "Sagemaker")
]  # AmazonSageMakerFullAccess's S3 scope: buckets whose name says SageMaker


@dataclass(frozen=True)
class ManagedPolicy:
    name: str
    description: str
    statements: tuple[Mapping[str, Any], ...]

    @property
    def arn(self) -> str:
        return PREFIX + self.name

    def document(self) -> dict[str, Any]:
        return {"Version": VERSION, "Statement": [dict(s) for s in self.statements]}


def _allow(action: str | list[str], resource: str | list[str] = "*") -> Mapping[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource}


POLICIES: dict[str, ManagedPolicy] = {
    p.arn: p
    for p in (
        ManagedPolicy("AdministratorAccess", "Provides full access to AWS services and resources.", (_allow("*"),)),
        ManagedPolicy(
            "AmazonSageMakerFullAccess",
            "Provides full access to Amazon SageMaker via the AWS Management Console and SDK.",
            (
                _allow("sagemaker:*"),
                _allow("s3:*", [r for b in _SAGEMAKER_BUCKETS for r in (b, f"{b}/*")]),
                _allow(["s3:ListAllMyBuckets", "s3:GetBucketLocation", "s3:ListBucket", "s3:GetObject"]),
                _allow(["cloudwatch:*", "logs:*", "application-autoscaling:*"]),
                _allow(["iam:GetRole", "iam:PassRole", "iam:ListRoles", "sts:GetCallerIdentity"]),
            ),
        ),
        ManagedPolicy(
            "AmazonSageMakerReadOnly",
            "Provides read only access to Amazon SageMaker via the AWS Management Console and SDK.",
            (_allow(["sagemaker:Describe*", "sagemaker:List*", "sagemaker:Get*", "sagemaker:Search"]),),
        ),
        ManagedPolicy("AmazonS3FullAccess", "Provides full access to all buckets.", (_allow("s3:*"),)),
        ManagedPolicy(
            "AmazonS3ReadOnlyAccess",
            "Provides read only access to all buckets.",
            (_allow(["s3:Get*", "s3:List*", "s3:Describe*"]),),
        ),
        ManagedPolicy(
            "CloudWatchFullAccess", "Provides full access to CloudWatch.", (_allow(["cloudwatch:*", "logs:*"]),)
        ),
        ManagedPolicy("CloudWatchLogsFullAccess", "Provides full access to CloudWatch Logs", (_allow("logs:*"),)),
    )
}
