"""The gRPC front's settings, validated where they are made (the CLI)."""

from __future__ import annotations

from dataclasses import dataclass

from servekit.errors import ConfigError

# gRPC's own 4 MiB receive limit is too small for image batches; TF Serving lifts it to 2 GiB. servekit stops at
# 64 MiB by default (a message is decoded whole in memory): --grpc_max_message_bytes raises it.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GrpcConfig:
    """``port`` is TF Serving's ``--port`` (8500 in its image); 0 picks a free one (tests)."""

    port: int
    host: str = "127.0.0.1"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # Several worker processes bind the same port with SO_REUSEPORT and the kernel spreads connections; one
    # process refuses a port another process holds instead of silently sharing it.
    reuse_port: bool = False
    grace_seconds: float = 5.0  # in-flight RPCs get this long at shutdown

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"gRPC port {self.port} is out of range")
        if not 0 < self.max_message_bytes <= 2**31 - 1:
            raise ConfigError(f"grpc_max_message_bytes must be between 1 and {2**31 - 1}, got {self.max_message_bytes}")
        if not self.grace_seconds >= 0:
            raise ConfigError("the gRPC shutdown grace must be >= 0 seconds")

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"
