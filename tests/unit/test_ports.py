"""The one rule for picking free ports (tfrecord_suite.ports)."""

from __future__ import annotations

import socket

from tfrecord_suite.ports import free_port, free_ports


def test_ports_asked_together_are_distinct_and_free():
    """Asked one at a time, the kernel may give one port twice (it is free again once the
    probing socket closes): SeaweedFS's master and S3 gateway got the same one in a test run and
    the gateway failed with "address already in use". Together they are all different."""
    ports = free_ports(200)
    assert len(set(ports)) == 200
    for port in [*ports[:5], free_port()]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
