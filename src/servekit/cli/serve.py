"""Run the HTTP server: one uvicorn server listening on the REST port and, optionally, the SageMaker port."""

from __future__ import annotations

import logging
import socket

import uvicorn

from servekit.config.models import ServerConfig
from servekit.protocols.app import build_app

log = logging.getLogger("servekit")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_server(config: ServerConfig, log_level: str = "info") -> None:
    sockets = [bind(config.host, config.rest_api_port)]
    if config.sagemaker_port is not None and config.sagemaker_port != config.rest_api_port:
        sockets.append(bind(config.host, config.sagemaker_port))
    for s in sockets:
        host, port = s.getsockname()[:2]
        log.info("servekit listening on http://%s:%d", host, port)
    app = build_app(config)
    uv = uvicorn.Config(app, lifespan="on", log_level=log_level, access_log=False, timeout_graceful_shutdown=30)
    uvicorn.Server(uv).run(sockets=sockets)
