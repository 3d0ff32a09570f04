"""The serving process's composition root (``servekit serve``): the serving core built once and handed to its
fronts (REST, and gRPC when asked), on one uvicorn server per worker process.

With ``--workers N`` a supervisor holds the REST (and SageMaker) ports, starts N worker processes that each run
their own event loop, models and batchers, and replaces a worker that dies. Each worker listens on the ports
itself with SO_REUSEPORT, once its models are loaded, so the kernel spreads new connections evenly over the
workers ready to take them: on one shared listening socket a burst of connections went mostly to whichever worker
woke first (32 opened at once: 24 to 31 of them on one of two workers), and keep-alive clients stay where they
landed. The price: connections a dying worker had not yet accepted are reset with it (on a shared socket the
other workers would have taken them).
Prometheus metrics are aggregated across workers through prometheus_client's multiprocess mode.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import logging
import multiprocessing as mp
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from types import FrameType

import uvicorn

from servekit._utils.parent_watch import exit_with_parent
from servekit._utils.processes import cpu_share
from servekit.config.grpc import GrpcConfig
from servekit.config.models import RuntimeOptions, ServerConfig
from servekit.errors import ConfigError
from servekit.launch.accept import fanned_out
from servekit.launch.connections import GuardStats, guarded_protocol, resolve
from servekit.launch.http_stack import HttpStack, http_stack
from servekit.serving.core.assembly import ServingCore
from servekit.serving.protocols.app import FastPath, build_app
from servekit.serving.protocols.http import Backlog
from servekit.serving.protocols.lifespan import CoreLifespan, Front

log = logging.getLogger("servekit")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
KEEP_ALIVE_S = 5  # uvicorn's default: an idle kept-alive connection is closed after this long


def _bound(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port``, not listening; a taken port is a ConfigError that says so."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY on accepted connections only when the socket's
    # proto says TCP (accepted sockets inherit it); with proto 0 small responses wait on Nagle's algorithm.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        busy = exc.errno == errno.EADDRINUSE
        hint = ": another process listens there (choose another port)" if busy else f": {exc.strerror}"
        raise ConfigError(f"cannot listen on {host}:{port}{hint}") from None
    # Non-blocking for good: O_NONBLOCK belongs to the socket, shared by every descriptor of it, and Python's
    # ``socket.dup()`` (launch/accept.py's copies, multiprocessing's when it passes a socket on) re-applies the
    # object's timeout to it, so a blocking-mode object would turn it blocking under a serving loop, which would then
    # wait inside accept() (seen: 10 s with no answer after a worker died, when the workers shared one socket).
    sock.setblocking(False)
    return sock


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (one serving process, ``servekit up``)."""
    sock = _bound(host, port)
    sock.listen(2048)
    return sock


def reserve(host: str, port: int) -> socket.socket:
    """The supervisor's hold on ``host:port`` for workers that listen on it with :func:`reuse_port_socket`: bound,
    not listening (so the kernel hands it no connections). A port anyone already listens on, servekit with
    SO_REUSEPORT included, is refused as :func:`bind` refuses it; port 0 becomes the port the kernel chose."""
    probe = _bound(host, port)  # without SO_REUSEPORT: a listener of any kind makes it fail; never listens itself
    port = probe.getsockname()[1]
    probe.close()
    return reuse_port_socket(host, port)


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT, not yet listening: the event loop's ``create_server``
    listens on it when the worker starts serving (after its models are loaded)."""
    return _bound(host, port, reuse_port=True)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: whatever it resolves to may be reachable from elsewhere
        return False


def _sockets(config: ServerConfig, take: Callable[[str, int], socket.socket] = bind) -> list[socket.socket]:
    if not is_loopback(config.host) and config.auth is None:
        log.warning(
            "listening on %s without authentication: anyone who can reach this address can run and inspect "
            "the models (give --auth_token_file, or --host 127.0.0.1 behind a proxy that authenticates)",
            config.host,
        )
    sockets = [take(config.host, config.rest_api_port)]
    if config.sagemaker_port is not None and config.sagemaker_port != config.rest_api_port:
        sockets.append(take(config.host, config.sagemaker_port))
    for s in sockets:
        host, port = s.getsockname()[:2]
        log.info("servekit listening on http://%s:%d", host, port)
    return sockets


def served_app(config: ServerConfig, grpc: GrpcConfig | None = None, backlog: Backlog | None = None) -> FastPath:
    """What one serving process runs: the serving core, built once here, under the REST app and (with ``grpc``)
    the gRPC server, each handed the same core and each with its own lifecycle."""
    core = ServingCore(config)
    watch_gpus(core, config)
    fronts: list[Front] = []
    if grpc is not None:  # imported only when asked for: a REST-only server never loads grpc
        from servekit.serving.protocols.grpc.server import GrpcFront

        fronts.append(GrpcFront(core, grpc))
    return build_app(config, core, backlog=backlog, around=lambda app: CoreLifespan(app, core, fronts))


def watch_gpus(core: ServingCore, config: ServerConfig) -> None:
    """The GPUs this process sees in its /metrics, when NVML is installed (the gpu extra) and it sees any."""
    if config.runtime.device.kind == "cpu":
        return
    from servekit.accelerators.nvml import GpuCollector, NvmlReader
    from servekit.serving.runtime.devices import machine_gpus

    gpus = machine_gpus()
    reader = NvmlReader.open() if gpus else None
    if reader is not None:
        core.metrics.watch(GpuCollector(reader, gpus))


def _uvicorn(
    config: ServerConfig, log_level: str, grpc: GrpcConfig | None = None, stack: HttpStack | None = None
) -> uvicorn.Server:
    stack = stack or http_stack()
    limits = resolve(config.connections)
    stats = GuardStats(limits)
    app = served_app(config, grpc, backlog=stats.backlog)  # the guard counts the requests the app may find alone
    stats.refuse = app.refuse_now  # overload refusals as a request's head is parsed (httptools)
    log.info("HTTP: %s", stack.describe())
    log.info(
        "connections: idle timeout %gs, request head %gs, body %gs, keep-alive %ds, at most %d open",
        limits.idle_timeout_seconds,
        limits.header_timeout_seconds,
        limits.body_timeout_seconds,
        KEEP_ALIVE_S,
        limits.max_connections,
    )
    # No proxy-header rewriting, no Server/Date headers: each costs time on every request and servekit
    # does not use them.
    uv = uvicorn.Config(
        app,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=30,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        loop=stack.loop,
        http=guarded_protocol(limits, stack.http, stats),
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    return uvicorn.Server(uv)


def run_server(
    config: ServerConfig, log_level: str = "info", grpc: GrpcConfig | None = None, stack: HttpStack | None = None
) -> None:
    """Serve REST (and gRPC when ``grpc`` is given). With several workers each binds the gRPC port itself with
    SO_REUSEPORT (``grpc.reuse_port``), so the kernel spreads gRPC connections over them as it does REST's.
    ``stack``: the event loop and HTTP parser (default: the fast pair where installed)."""
    stack = stack or http_stack()
    exit_with_parent()  # an instance of `servekit up`'s: ends with its plane, even a plane killed with SIGKILL
    if config.workers == 1:
        _run(config, _sockets(config), log_level, grpc, stack)
        return
    Supervisor(config, _sockets(config, take=reserve), log_level, grpc, stack).run()


def _run(
    config: ServerConfig, sockets: list[socket.socket], log_level: str, grpc: GrpcConfig | None, stack: HttpStack | None
) -> None:
    """One process's uvicorn server on ``sockets``, each handed to uvloop under several descriptors
    (launch/accept.py), until stopped."""
    stack = stack or http_stack()
    _uvicorn(config, log_level, grpc, stack).run(sockets=fanned_out(sockets, stack.loop))


def _worker_main(
    config: ServerConfig,
    ports: list[tuple[str, int]],
    log_level: str,
    grpc: GrpcConfig | None = None,
    stack: HttpStack | None = None,
) -> None:
    """One worker: its own SO_REUSEPORT sockets on the supervisor's ``ports`` (listening once its models load)."""
    logging.basicConfig(
        level=log_level.upper(), format=f"%(asctime)s %(levelname)s [worker {os.getpid()}] %(name)s: %(message)s"
    )
    log.info("intra-op threads: %s (--tensorflow_intra_op_parallelism)", config.runtime.intra_op_threads or "default")
    _run(config, [reuse_port_socket(host, port) for host, port in ports], log_level, grpc, stack)


def worker_runtime(runtime: RuntimeOptions, workers: int, cpus: int | None = None) -> RuntimeOptions:
    """Each of ``workers`` processes' runtime options: unless the intra-op threads were set, a framework pool gets
    the worker's share of the CPUs, not one thread per CPU in every worker (N workers would run N times as many
    compute threads as there are CPUs; measured on 2 cores with 2 workers, 1 thread each was never worse for the
    overloaded MLP's p99 and usually a little better, benchmarks/OVERLOAD_RESULTS.md). Batch transform's
    instances share the CPUs by the same rule (transform/engine.py)."""
    if runtime.intra_op_threads or workers <= 1:
        return runtime
    return dataclasses.replace(runtime, intra_op_threads=cpu_share(workers, cpus))


class Supervisor:
    """Starts ``config.workers`` processes on the held ports and keeps that many alive until told to stop."""

    def __init__(
        self,
        config: ServerConfig,
        sockets: list[socket.socket],
        log_level: str,
        grpc: GrpcConfig | None = None,
        stack: HttpStack | None = None,
    ) -> None:
        self._config = config
        self._grpc = grpc
        self._stack = stack
        self._sockets = sockets  # held, not listening (reserve): the workers listen beside them
        self._ports = [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in sockets]
        self._log_level = log_level
        self._ctx = mp.get_context("spawn")
        self._workers: list[BaseProcess] = []
        self._stopping = False

    def _spawn(self) -> BaseProcess:
        proc = self._ctx.Process(
            target=_worker_main,
            args=(self._config, self._ports, self._log_level, self._grpc, self._stack),
            name="servekit-worker",
        )
        proc.start()
        log.info("started worker %s", proc.pid)
        return proc

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> None:
        # Workers inherit this before they import prometheus_client, so their metrics go to shared files.
        metrics_dir = tempfile.mkdtemp(prefix="servekit-metrics-")
        os.environ[MULTIPROC_ENV] = metrics_dir
        self._config = dataclasses.replace(
            self._config,
            metrics_multiprocess_dir=metrics_dir,
            wait_for_models_seconds=self._config.wait_for_models_seconds or 600.0,
            runtime=worker_runtime(self._config.runtime, self._config.workers),
        )
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)
        self._workers = [self._spawn() for _ in range(self._config.workers)]
        started = [time.monotonic()] * len(self._workers)
        # A worker that dies soon after starting (bad config, unwritable capture dir) is restarted with a
        # growing delay, so a crash loop does not spin the machine.
        delay = [0.0] * len(self._workers)
        due = [0.0] * len(self._workers)
        try:
            while not self._stopping:
                time.sleep(0.2)
                now = time.monotonic()
                for i, proc in enumerate(self._workers):
                    if proc.is_alive() or self._stopping:
                        continue
                    if due[i] == 0.0:
                        quick = now - started[i] < 10.0
                        delay[i] = min(max(delay[i] * 2, 1.0), 30.0) if quick else 0.0
                        due[i] = now + delay[i]
                        log.warning(
                            "worker %s exited with %s; replacing it in %.0fs", proc.pid, proc.exitcode, delay[i]
                        )
                        _mark_dead(proc.pid)
                    if now >= due[i]:
                        self._workers[i] = self._spawn()
                        started[i], due[i] = time.monotonic(), 0.0
        finally:
            for proc in self._workers:
                if proc.is_alive() and proc.pid is not None:
                    os.kill(proc.pid, signal.SIGTERM)
            for proc in self._workers:
                proc.join(timeout=35)
                if proc.is_alive():
                    proc.kill()
            for s in self._sockets:
                s.close()
            shutil.rmtree(metrics_dir, ignore_errors=True)  # every worker has exited: nobody reads it any more


def _mark_dead(pid: int | None) -> None:
    if pid is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
