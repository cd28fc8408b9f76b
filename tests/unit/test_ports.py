"""The one rule for picking free ports (tfrecord_suite.ports)."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import tempfile

from tfrecord_suite.ports import (
    CURSOR_FILE,
    LOWEST_PORT,
    NODE_PORTS,
    ephemeral_range,
    free_port,
    free_ports,
)


def test_ports_asked_together_are_distinct_and_free_on_every_address():
    """Asked one at a time, the kernel may give one port twice (it is free again once the
    probing socket closes): SeaweedFS's master and S3 gateway got the same one in a test run and
    the gateway failed with "address already in use". Together they are all different, and a
    server binding 0.0.0.0 (the tf.data service's do) can have each."""
    ports = free_ports(200)
    assert len(set(ports)) == 200
    for port in [*ports[:5], free_port()]:
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", port))


def test_ports_are_below_the_range_connections_and_port_0_servers_take():
    """A CI run's tf.data worker failed "Failed to add port to server ... '0.0.0.0:59803'": the
    kernel had chosen 59803 (bind port 0), and in the seconds the worker spent importing
    TensorFlow, an outgoing connection or a server binding port 0 took it from the same range."""
    first_ephemeral, _ = ephemeral_range()
    assert first_ephemeral - LOWEST_PORT >= 1000  # else the rule falls back to the kernel's choice
    assert all(LOWEST_PORT <= port < min(first_ephemeral, NODE_PORTS) for port in free_ports(50))


def test_a_port_held_on_one_address_is_skipped():
    """The next port the shared cursor would give, held on one address only (127.0.0.3), is not
    given: a server on 0.0.0.0 could not bind it."""
    with open(os.path.join(tempfile.gettempdir(), CURSOR_FILE.format(uid=os.getuid()))) as f:
        upcoming = int(f.read())
    with socket.socket() as other:
        other.bind(("127.0.0.3", upcoming))
        other.listen()
        assert free_port() != upcoming


def _ask(count: int) -> list[int]:
    return free_ports(count)


def test_processes_asking_at_once_get_different_ports():
    """Separate processes (pytest-xdist's workers) share one cursor: none gets a port another
    was just given, though each probe socket is closed by then."""
    with concurrent.futures.ProcessPoolExecutor(4) as pool:
        given = [port for ports in pool.map(_ask, [25] * 8) for port in ports]
    assert len(given) == len(set(given)) == 200
