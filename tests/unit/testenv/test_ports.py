"""Test ports come from a range of their own, never twice, never one that is taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from rljob_testenv import ports


def test_the_range_is_the_variable_or_the_default() -> None:
    assert ports.port_range({}) == ports.DEFAULT_PORTS
    assert ports.port_range({ports.PORTS_ENV: "25000-29999"}) == (25000, 29999)
    # below the kernel's ephemeral ports, which outgoing connections take at any moment
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    assert ports.DEFAULT_PORTS[1] < int(ephemeral[0])


@pytest.mark.parametrize("given", ["30000-20000", "80-90", "20000", "a-b"])
def test_a_bad_range_is_refused(given: str) -> None:
    with pytest.raises(ValueError):
        ports.port_range({ports.PORTS_ENV: given})


def test_ports_are_in_the_range_never_twice_and_never_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_handed_out", set())  # what this process handed out so far
    taken = socket.socket()
    for first in range(26000, 27000, 3):  # three free ports in a row
        try:
            taken.bind(("0.0.0.0", first))
        except OSError:
            continue
        break
    with taken:
        taken.listen()
        monkeypatch.setenv(ports.PORTS_ENV, f"{first}-{first + 2}")
        handed = {ports.free_port(), ports.free_port()}
        assert handed == {first + 1, first + 2}
        with pytest.raises(RuntimeError, match="no free port"):
            ports.free_port()
