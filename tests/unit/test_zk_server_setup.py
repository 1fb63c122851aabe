"""``free_port``: a port a process can stop and start again on."""

from __future__ import annotations

import socket

from trikafka.zk import server_setup
from trikafka.zk.server_setup import free_port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_free_ports_lie_below_the_ephemeral_range_so_no_connection_takes_them_as_its_source(  # type: ignore[no-untyped-def]
        monkeypatch, tmp_path):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")  # the file's format (and Linux's default)
    monkeypatch.setattr(server_setup, "_EPHEMERAL_RANGE_FILE", ranges)
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < 32768 for port in ports), sorted(ports)
    assert all(_bindable(port) for port in ports)


def test_without_a_known_ephemeral_range_the_kernel_picks(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(server_setup, "_EPHEMERAL_RANGE_FILE", tmp_path / "absent")
    assert _bindable(free_port())
