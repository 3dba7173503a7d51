"""Replica ports on this host: which ones other processes hold, and a last check before spawn.

The scheduler gives each replica a port of the node's range (COHORT_PORT_RANGE_*),
never one SQL knows is in use. What SQL cannot know is a process outside Cohort
holding one: the agent reports the listening ports of its range in every heartbeat
(placement skips them), and checks the replica's port right before it spawns it,
refusing with a clear message rather than letting TensorFlow fail later. There is
no probe-and-release of port 0 anywhere: such a port comes from the ephemeral range,
where any process may be handed it in between; the replica range should lie outside
that range (`check_range`), so the kernel never gives its ports away.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

LISTEN = "0A"  # the TCP state in /proc/net/tcp


def parse_proc_net_tcp(text: str, start: int, end: int) -> set[int]:
    """Local ports in [start, end] of sockets in LISTEN state, from /proc/net/tcp{,6}."""
    ports = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != LISTEN:
            continue
        port = int(fields[1].rsplit(":", 1)[1], 16)
        if start <= port <= end:
            ports.add(port)
    return ports


def listening_ports(start: int, end: int, proc: Path = Path("/proc/net")) -> set[int]:
    """Ports of the range that a process in this network namespace listens on."""
    ports: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            ports |= parse_proc_net_tcp((proc / name).read_text(), start, end)
        except OSError:
            continue  # no /proc (not Linux) or no IPv6: the pre-spawn check remains
    return ports


def port_problem(port: int) -> str | None:
    """Why the replica could not listen on `port` here, or None if it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As gRPC does: a port whose last connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))  # noqa: S104 - the replica listens on all addresses
        except OSError as exc:
            return f"port {port} is held by another process on this node ({exc.strerror})"
    return None


def check_range(
    start: int, end: int, path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")
) -> str | None:
    """A warning if the replica range overlaps the kernel's ephemeral port range."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return None
    if start <= high and low <= end:
        return (
            f"replica ports {start}-{end} overlap the ephemeral range {low}-{high}: any "
            "process may be given one of them; move COHORT_PORT_RANGE_* below "
            f"{low} or reserve them in net.ipv4.ip_local_reserved_ports"
        )
    return None


def port_space() -> str:
    """Which network stack this process binds in: agents that report the same one
    (several on one host, say) share its ports, and the scheduler hands each out once.

    Linux: the boot id and the network namespace; elsewhere the host name.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/netns:{os.stat('/proc/self/ns/net').st_ino}"
    except OSError:
        return f"host:{socket.gethostname()}"
