"""Kubernetes names from SageMaker names, and the Dockerfile of the image the manifests run."""

from __future__ import annotations

import pytest

from servekit._version import __version__
from servekit.tools.export import ExportError, dockerfile
from servekit.tools.export.names import dns_name, label_value


@pytest.mark.parametrize(
    ("parts", "name"),
    [
        (("churn",), "churn"),
        (("Churn", "VariantA"), "churn-varianta"),
        (("2024-model",), "s-2024-model"),
        (("a--b", "-c-"), "a-b-c"),
    ],
)
def test_dns_names(parts: tuple[str, ...], name: str) -> None:
    assert dns_name(*parts) == name


def test_long_names_are_cut_with_a_digest_that_keeps_them_apart() -> None:
    a, b = dns_name("e" * 63, "variant-one"), dns_name("e" * 63, "variant-two")
    assert len(a) == len(b) == 63 and a != b
    assert a[:53] == "e" * 53


def test_label_values_keep_sagemaker_names() -> None:
    assert label_value("Variant-1") == "Variant-1"
    assert label_value("x" * 70) == "x" * 63


def test_dockerfile_installs_servekit_and_starts_serve() -> None:
    text = dockerfile()
    lines = text.splitlines()
    assert "FROM python:3.11-slim" in lines
    assert f'RUN pip install "servekit[s3]=={__version__}"' in lines
    assert 'ENTRYPOINT ["servekit", "serve"]' in lines
    assert (
        'CMD ["--model_config_file", "/etc/servekit/models.yaml", "--host", "0.0.0.0", "--rest_api_port", "8080"]'
        in lines
    )
    assert "COPY models/" not in text


def test_dockerfile_with_a_wheel_and_baked_models() -> None:
    text = dockerfile(wheel="servekit-0.1.0-py3-none-any.whl", models=["churn-b"], extras=["s3", "sklearn"])
    assert "COPY servekit-0.1.0-py3-none-any.whl /tmp/" in text
    assert 'pip install "/tmp/servekit-0.1.0-py3-none-any.whl[s3,sklearn]"' in text
    assert "COPY models/ /opt/servekit/models/" in text
    with pytest.raises(ExportError):
        dockerfile(models=["../etc"])
    with pytest.raises(ExportError):
        dockerfile(extras=["s3; rm -rf /"])
