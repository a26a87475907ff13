"""A free local TCP port, for the servers the tests, the demo and the peers start.

A port is handed out some time before its server binds it, so it is taken from a range that
nothing else hands out by itself: below the kernel's ephemeral ports (32768-60999 here, which
every outgoing connection and every bind to port 0 draws from, the operator's API clients
and torchrun's and Ray's own listeners among them), above Ray's worker ports (10002-19999),
and apart from kwokctl's, which counts down from 32767. `make test` runs two pytest processes
at once and gives each half of the range (RLJOB_TEST_PORTS), so that they never pick the same
port; within a process, no port is handed out twice.
"""

from __future__ import annotations

import os
import random
import socket

PORTS_ENV = "RLJOB_TEST_PORTS"  # "LOW-HIGH", inclusive
DEFAULT_PORTS = (20000, 29999)

_handed_out: set[int] = set()


def port_range(env: dict[str, str] | None = None) -> tuple[int, int]:
    """The ports this process may hand out: RLJOB_TEST_PORTS, else DEFAULT_PORTS."""
    given = (os.environ if env is None else env).get(PORTS_ENV)
    if not given:
        return DEFAULT_PORTS
    low, _, high = given.partition("-")
    first, last = int(low), int(high)
    if not 1024 < first <= last < 65536:
        raise ValueError(f"{PORTS_ENV}={given!r}: want LOW-HIGH between 1025 and 65535")
    return first, last


def free_port() -> int:
    """A port of this process's range that no one listens on and this process has not
    handed out before."""
    first, last = port_range()
    for _ in range(1000):
        port = random.randint(first, last)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:  # every address: a server on 127.0.0.1 or on all of them stops this bind
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port left in {first}-{last}")
