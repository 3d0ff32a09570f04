"""A systemd unit that runs ``servekit up`` as a service (``servekit up --print-systemd-unit``; docs/supervisor.md).

A supervisor restarts a plane that died: its endpoints come back from the home's state, and the instances of the
dead plane have stopped on their own within seconds (``_utils/parent_watch``)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path


def systemd_unit(up_args: Sequence[str], home: Path, python: str) -> str:
    """The unit's text: ``python -m servekit.cli.main up`` with ``up_args`` (no ``--home``: the unit names the
    absolute ``home``, which ``./.servekit`` would otherwise resolve against systemd's working directory)."""
    command = shlex.join([python, "-m", "servekit.cli.main", "up", "--home", str(home.absolute()), *up_args])
    # systemd reads % as a specifier and $ as a variable in ExecStart: keep the command as written
    command = command.replace("%", "%%").replace("$", "$$")
    return f"""\
# servekit up as a systemd service. As your user (no root):
#   servekit up ... --print-systemd-unit > ~/.config/systemd/user/servekit.service
#   systemctl --user daemon-reload && systemctl --user enable --now servekit
#   loginctl enable-linger "$USER"     # keep it running after you log out
# System-wide: /etc/systemd/system/servekit.service, add User= under [Service], WantedBy=multi-user.target.
# Logs: journalctl [--user] -u servekit
[Unit]
Description=servekit control plane (servekit up)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart={command}
WorkingDirectory={home.absolute().parent}
Environment=PYTHONUNBUFFERED=1
# Restarted after a crash or a kill (its endpoints come back from the home's state); not after a clean stop.
Restart=on-failure
RestartSec=2
# SIGTERM to servekit up alone: it stops its instances and jobs itself; whatever is left after TimeoutStopSec is
# killed with the rest of the unit's processes.
KillMode=mixed
TimeoutStopSec=90

[Install]
WantedBy=default.target
"""
