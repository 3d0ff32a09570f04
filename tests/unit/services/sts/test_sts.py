"""STS's GetCallerIdentity in the query protocol, through a real botocore client."""

from __future__ import annotations

from pathlib import Path

import botocore.exceptions
import pytest

from servekit.aws.credentials import Credentials
from servekit.aws.names import Account
from servekit.aws.sigv4 import Verifier
from servekit.services.sts.api import StsService
from servekit.testing.aws import asgi_client


def test_the_caller_is_the_calling_key_in_the_homes_account(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    app_key = creds.add_key("invoke", "my-app")
    service = StsService(Account(account_id="123456789012"), Verifier(creds))
    admin = asgi_client(service, "sts", creds.admin).get_caller_identity()
    assert admin["Account"] == "123456789012"
    assert admin["UserId"] == creds.admin.access_key_id
    app = asgi_client(service, "sts", app_key).get_caller_identity()
    assert app["Arn"] == "arn:aws:iam::123456789012:user/my-app"


def test_unknown_keys_and_other_operations_get_stss_errors(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    service = StsService(Account(), Verifier(creds))
    forged = type(creds.admin)("AKIANOTAKEY000000000", "secret")
    with pytest.raises(botocore.exceptions.ClientError) as unknown:
        asgi_client(service, "sts", forged).get_caller_identity()
    assert unknown.value.response["Error"]["Code"] == "InvalidClientTokenId"
    with pytest.raises(botocore.exceptions.ClientError) as other:
        asgi_client(service, "sts", creds.admin).get_session_token()
    assert other.value.response["Error"]["Code"] == "InvalidAction"
    assert "GetCallerIdentity" in other.value.response["Error"]["Message"]
