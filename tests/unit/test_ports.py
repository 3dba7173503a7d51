"""Replica ports: ports other processes hold are found, and a held port is refused."""

from __future__ import annotations

import socket
from pathlib import Path

from workers.node.ports import check_range, listening_ports, parse_proc_net_tcp, port_problem

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7918 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0100007F:791A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0100007F:7919 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 3
   3: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4
"""


def test_parse_listening_ports_in_range() -> None:
    # 0x7918 = 31000 and 0x791A = 31002 listen; 31001 is an established connection,
    # 8080 is outside the range.
    assert parse_proc_net_tcp(PROC_NET_TCP, 31000, 31099) == {31000, 31002}


def test_a_real_listener_is_seen_and_refused() -> None:
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))  # noqa: S104 - a stand-in for a foreign process
        listener.listen()
        port = listener.getsockname()[1]
        assert port in listening_ports(port, port)
        problem = port_problem(port)
        assert problem is not None and f"port {port} is held by another process" in problem
    assert port_problem(port) is None  # free again once it closed


def test_range_overlapping_the_ephemeral_range_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("32768\t60999\n")
    assert check_range(29500, 29999, path) is None
    warning = check_range(32000, 33000, path)
    assert warning is not None and "overlap the ephemeral range 32768-60999" in warning


def test_a_moved_range_start_keeps_the_default_width() -> None:
    from services.settings import Settings

    moved = Settings(PORT_RANGE_START=31000)
    assert (moved.PORT_RANGE_START, moved.PORT_RANGE_END) == (31000, 31499)
    explicit = Settings(PORT_RANGE_START=31000, PORT_RANGE_END=31010)
    assert explicit.PORT_RANGE_END == 31010
