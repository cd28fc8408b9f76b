"""Free TCP ports for the servers this host starts.

The local tf.data service's processes pick theirs here; the test harness's real parts
(tests/realparts) and the benchmarks import the same rule.

Ports come from below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``) and
Kubernetes' NodePorts, in turn from one cursor every process on the host shares. The kernel's
own choice (bind port 0) is in the ephemeral range, and so is every outgoing connection's local
port and every server that binds port 0 (gRPC and Beam servers do): a port chosen there and
bound a few seconds later, once the server has imported TensorFlow, was taken in between in a
CI run ("Failed to add port to server ... '0.0.0.0:59803'"). Below the range nothing takes a
port by chance, and the shared cursor keeps two processes that ask at the same moment from
getting the same one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import tempfile

#: The lowest port handed out: below it, fixed ports of common servers (8080, 9000, ...).
LOWEST_PORT = 10_000

#: Above the ports handed out: Kubernetes' NodePort range (30000-32767) is kube-proxy's on a
#: node, the one-node cluster's included.
NODE_PORTS = 30_000

#: Where the shared cursor lives (a decimal port number), under the system's temporary folder;
#: one per user, who can always write their own.
CURSOR_FILE = "tfrecord-suite-ports-{uid}"


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range, (first, last); Linux's default where unreadable."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(v) for v in f.read().split())
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


def _bound(sock: socket.socket, port: int) -> bool:
    """Bind ``sock`` to ``port`` on every IPv4 address; whether it could (nothing holds it)."""
    try:
        sock.bind(("0.0.0.0", port))
    except OSError:
        return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nothing holds now on any of this host's IPv4 addresses.

    Each port is probed by binding it on 0.0.0.0, and every probe stays bound until all are
    chosen. The ports are free when this returns, not reserved: a server should bind them soon.
    Where the ephemeral range leaves fewer than 1,000 ports below it, the kernel chooses
    (port 0), with the risk the module's docstring describes.
    """
    first_ephemeral, _ = ephemeral_range()
    pool = range(LOWEST_PORT, min(first_ephemeral, NODE_PORTS))
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        if len(pool) < 1000:
            for sock in sockets:
                sock.bind(("0.0.0.0", 0))
            return [sock.getsockname()[1] for sock in sockets]
        path = os.path.join(tempfile.gettempdir(), CURSOR_FILE.format(uid=os.getuid()))
        with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), "r+") as cursor:
            fcntl.flock(cursor, fcntl.LOCK_EX)  # released when the file closes
            text = cursor.read().strip()
            port = int(text) if text.isdigit() and int(text) in pool else secrets.choice(pool)
            ports: list[int] = []
            for sock in sockets:
                for _ in range(len(pool)):
                    candidate, port = port, pool.start + (port + 1 - pool.start) % len(pool)
                    if _bound(sock, candidate):
                        ports.append(candidate)
                        break
                else:
                    raise OSError(f"no free TCP port in {pool.start}-{pool.stop - 1}")
            cursor.seek(0)
            cursor.truncate()
            cursor.write(str(port))
        return ports


def free_port() -> int:
    """A TCP port nothing holds now; for several, :func:`free_ports`."""
    (port,) = free_ports(1)
    return port
