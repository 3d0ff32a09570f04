"""A job's role policy: the one attached to its role's name in the home, else the default an execution role holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.aws.policy import PolicyError, allowed
from servekit.services.training.roles import ROLES, default_policy, request_buckets, role_policy

REQUEST = {
    "RoleArn": "arn:aws:iam::000000000000:role/Trainer",
    "HyperParameters": {"sagemaker_submit_directory": '"s3://code-bucket/src/sourcedir.tar.gz"'},
    "InputDataConfig": [{"DataSource": {"S3DataSource": {"S3Uri": "s3://my-data/train/"}}}],
    "OutputDataConfig": {"S3OutputPath": "s3://my-models/out"},
}


def test_the_default_allows_the_jobs_buckets_metrics_and_logs_but_no_control_plane_change() -> None:
    assert request_buckets(REQUEST) == ["code-bucket", "my-data", "my-models"]
    policy = [default_policy(REQUEST)]
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::my-data/train/part-1.csv")
    assert allowed(policy, "s3:PutObject", "arn:aws:s3:::my-models/out/model.tar.gz")
    assert allowed(policy, "s3:PutObject", "arn:aws:s3:::sagemaker-us-east-1-000000000000/x")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::someone-elses/data")
    assert allowed(policy, "cloudwatch:PutMetricData") and allowed(policy, "logs:PutLogEvents")
    assert allowed(policy, "sagemaker:DescribeTrainingJob")
    for action in (
        "sagemaker:CreateEndpoint",
        "sagemaker:DeleteModel",
        "sagemaker:StopTrainingJob",
        "iam:PutRolePolicy",
    ):
        assert not allowed(policy, action), action


def test_a_policy_attached_to_the_role_name_replaces_the_default(tmp_path: Path) -> None:
    (tmp_path / ROLES).mkdir(parents=True)
    mine = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}
    (tmp_path / ROLES / "Trainer.json").write_text(json.dumps(mine))
    policy = role_policy(tmp_path, REQUEST["RoleArn"], REQUEST)
    assert policy == [mine]
    assert not allowed(policy, "s3:PutObject", "arn:aws:s3:::my-models/out/model.tar.gz")
    assert role_policy(tmp_path, "arn:aws:iam::000000000000:role/Other", REQUEST) == [default_policy(REQUEST)]
    (tmp_path / ROLES / "Trainer.json").write_text('{"Statement": [{"Effect": "Allow", "Action": "*"}]}')
    with pytest.raises(PolicyError, match=r"Trainer\.json: Statement 1: give Resource or NotResource"):
        role_policy(tmp_path, REQUEST["RoleArn"], REQUEST)


def test_a_roles_policies_in_iam_come_after_the_file_and_before_the_default(tmp_path: Path) -> None:
    """The order a job's, a pipeline's and an assumed session's policy is found in: the file under the home, else the
    role's policies in IAM when it has any, else the default."""
    mine = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}
    held = {"Trainer": [mine], "Empty": []}
    iam = held.get
    assert role_policy(tmp_path, REQUEST["RoleArn"], REQUEST, iam) == [mine]
    empty = "arn:aws:iam::000000000000:role/Empty"
    assert role_policy(tmp_path, empty, REQUEST, iam) == [default_policy(REQUEST)]
    unknown = "arn:aws:iam::000000000000:role/Unknown"
    assert role_policy(tmp_path, unknown, REQUEST, iam) == [default_policy(REQUEST)]
    (tmp_path / ROLES).mkdir(parents=True)
    written = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "*", "Resource": "*"}]}
    (tmp_path / ROLES / "Trainer.json").write_text(json.dumps(written))
    assert role_policy(tmp_path, REQUEST["RoleArn"], REQUEST, iam) == [written]
