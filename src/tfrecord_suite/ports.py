"""Free TCP ports for the servers this host starts.

The local tf.data service's processes pick theirs here; the test harness's real parts
(tests/realparts) and the benchmarks import the same rule.
"""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports nothing listens on at ``host`` now (the kernel's choice).

    Every socket stays bound until all are chosen: asked one at a time, the kernel may hand out
    the same port twice (it was free again once the first socket closed), and two servers given
    one port fail to start ("address already in use"; SeaweedFS's master and S3 gateway did so
    in a test run). The ports are free when this returns, not reserved: a server should bind
    them soon.
    """
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` now; for several, :func:`free_ports`."""
    (port,) = free_ports(1, host)
    return port
