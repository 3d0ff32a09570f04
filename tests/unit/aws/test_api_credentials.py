"""The key file: created 0600 once, scopes, secrets never in a repr, a client the CLI can use."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from servekit.aws import ApiError, Credentials, authorize
from servekit.aws.credentials import FILENAME, client


def test_created_once_with_mode_0600_and_an_admin_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = Credentials.load_or_create(home)
    path = home / FILENAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    admin = first.admin
    assert admin.scope == "admin" and admin.access_key_id.startswith("AKIA") and len(admin.access_key_id) == 20
    assert len(admin.secret_access_key) == 40
    again = Credentials.load_or_create(home)
    assert again.admin == admin
    assert [p.name for p in home.iterdir()] == [FILENAME]  # no temporary files left behind


def test_invoke_keys_are_added_persisted_and_removed(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    invoker = creds.add_key("invoke", "app")
    assert stat.S_IMODE((tmp_path / FILENAME).stat().st_mode) == 0o600
    reloaded = Credentials.load(tmp_path)
    assert reloaded.lookup(invoker.access_key_id) == invoker
    assert reloaded.first("invoke") == invoker
    assert reloaded.remove_key(invoker.access_key_id)
    assert Credentials.load(tmp_path).lookup(invoker.access_key_id) is None
    assert not reloaded.remove_key(invoker.access_key_id)
    with pytest.raises(ValueError):
        creds.add_key("root", "x")  # type: ignore[arg-type]


def test_scopes() -> None:
    from servekit.aws.credentials import new_key

    admin, invoker = new_key("admin"), new_key("invoke")
    authorize(admin, "admin", "sagemaker:CreateEndpoint")
    authorize(admin, "invoke", "sagemaker:InvokeEndpoint")
    authorize(invoker, "invoke", "sagemaker:InvokeEndpoint")
    with pytest.raises(ApiError) as e:
        authorize(invoker, "admin", "sagemaker:DeleteEndpoint")
    assert e.value.code == "AccessDeniedException"
    assert "sagemaker:DeleteEndpoint" in e.value.message and invoker.secret_access_key not in e.value.message


def test_secrets_stay_out_of_reprs(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    assert creds.admin.secret_access_key not in repr(creds.admin)
    assert creds.admin.secret_access_key not in repr(creds.keys)


def test_a_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / FILENAME).write_text(json.dumps({"keys": [{"access_key_id": "A"}]}))
    with pytest.raises(ValueError, match="not a servekit credentials file"):
        Credentials.load(tmp_path)


def test_client_is_a_botocore_client_signed_with_the_homes_key(tmp_path: Path) -> None:
    creds = Credentials.load_or_create(tmp_path)
    sm = client(tmp_path, "sagemaker", "http://127.0.0.1:9")
    frozen = sm._request_signer._credentials.get_frozen_credentials()
    assert frozen.access_key == creds.admin.access_key_id
    assert sm.meta.endpoint_url == "http://127.0.0.1:9"
    assert sm.meta.region_name == "us-east-1"
    invoker = creds.add_key("invoke")
    rt = client(tmp_path, "sagemaker-runtime", "http://127.0.0.1:9", scope="invoke")
    assert rt._request_signer._credentials.get_frozen_credentials().access_key == invoker.access_key_id


def test_keys_changed_by_another_process_take_effect(tmp_path: Path) -> None:
    server_side = Credentials.load_or_create(tmp_path)
    cli_side = Credentials.load(tmp_path)
    added = cli_side.add_key("invoke", "later")
    assert server_side.lookup(added.access_key_id) == added
    cli_side.remove_key(added.access_key_id)
    assert server_side.lookup(added.access_key_id) is None
    assert server_side.lookup(server_side.admin.access_key_id) == server_side.admin
