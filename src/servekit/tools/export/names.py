"""Kubernetes names and labels for SageMaker names.

SageMaker names allow upper case and may start with a digit; a Kubernetes Service name is a DNS-1035 label
(lower case, starts with a letter, at most 63 characters). Names are lower-cased, anything else becomes ``-``,
one that starts with a digit gets an ``s-`` prefix, and a name that would pass 63 characters is cut and ends in
eight hex digits of its SHA-1, so two long names that share a prefix stay apart.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
PART_OF = "servekit"
ENDPOINT_LABEL = "servekit/endpoint"
VARIANT_LABEL = "servekit/variant"
_NOT_NAME = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")


def dns_name(*parts: str) -> str:
    """The DNS-1035 label for ``parts`` joined with ``-``."""
    raw = "-".join(parts)
    name = _NOT_NAME.sub("-", raw.lower()).strip("-")
    name = re.sub("-{2,}", "-", name) or "servekit"
    if not name[0].isalpha():
        name = f"s-{name}"
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(raw.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9].rstrip('-')}-{digest}"
    return name


def label_value(value: str) -> str:
    """A valid label value: at most 63 of ``[A-Za-z0-9_.-]``, starting and ending alphanumeric."""
    cleaned = _NOT_LABEL.sub("-", value)[:MAX_NAME].strip("-_.")
    return cleaned


def selector(endpoint: str, variant: str | None = None) -> dict[str, str]:
    """Labels that pick the pods of an endpoint (or of one of its variants)."""
    labels = {ENDPOINT_LABEL: label_value(endpoint)}
    if variant is not None:
        labels[VARIANT_LABEL] = label_value(variant)
    return labels


def labels(endpoint: str, variant: str | None = None) -> dict[str, str]:
    """The recommended ``app.kubernetes.io`` labels plus the selector's."""
    return {
        "app.kubernetes.io/name": PART_OF,
        "app.kubernetes.io/instance": dns_name(endpoint),
        **({"app.kubernetes.io/component": dns_name(variant)} if variant is not None else {}),
        **selector(endpoint, variant),
    }
