"""A TCP relay on 127.0.0.1 that holds every round trip for a set delay: a network's latency.

Two modes. ``connect``: an HTTP CONNECT proxy (what ``https_proxy`` names) that tunnels every
CONNECT to one target, as TensorFlow's GCS filesystem reaches the local GCS server
(:mod:`fakes.gcs_tls`); the tunnel's answer costs one delay. ``plain``: every connection is
relayed to the target as it is (an S3 endpoint is such an address); the connection itself costs
one delay, as a TCP handshake does.

Then each client turn (the first bytes the client sends after the server spoke) is held for the
delay, as a network with that round-trip time would: a request on a kept-alive connection costs
one delay, a new connection one more (and a TLS handshake through a tunnel one more again).
Relaying uses ``os.splice``; ``stats`` counts connections and bytes.

The delay is settable while the relay runs, from this process (``delay_ms``) or, with a delay
file (:class:`SharedDelay`), from any process: the bench's readers switch it between variants.
Run alone (``python -m fakes.delayproxy --target HOST:PORT [--connect] [--delay-file F]``), it
prints its port and relays until it is stopped, so a CPU budget can be given to it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import select
import signal
import socket
import struct
import sys
import threading
import time


class SharedDelay:
    """A delay in milliseconds kept in an 8-byte file, read and written by any process."""

    def __init__(self, path: str):
        self.path = path
        if not os.path.exists(path) or os.path.getsize(path) != 8:
            with open(path, "wb") as fh:
                fh.write(struct.pack("d", 0.0))
        self._fh = open(path, "r+b")  # held for the map's lifetime
        self._map = mmap.mmap(self._fh.fileno(), 8)

    @property
    def ms(self) -> float:
        """The delay now."""
        return struct.unpack("d", self._map[:8])[0]

    @ms.setter
    def ms(self, value: float) -> None:
        self._map[:8] = struct.pack("d", float(value))

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()
        self._fh.close()


class DelayProxy:
    """Relays every connection to ``target`` (host, port), holding each round trip ``delay_ms``.

    Args:
        target: Where every connection goes.
        delay_ms: The initial delay (ignored with ``delay_file``).
        connect: Speak HTTP CONNECT first (a proxy for ``https_proxy``), else relay as is.
        delay_file: A :class:`SharedDelay` file the delay is read from on every round trip.

    """

    def __init__(
        self,
        target: tuple[str, int],
        delay_ms: float = 0.0,
        connect: bool = True,
        delay_file: str = "",
    ):
        self.target = target
        self.connect = connect
        self._shared = SharedDelay(delay_file) if delay_file else None
        self._delay_ms = delay_ms
        self.stats = {"tunnels": 0, "bytes_down": 0, "bytes_up": 0}
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def delay_ms(self) -> float:
        """The delay held per round trip (settable while it runs)."""
        return self._shared.ms if self._shared else self._delay_ms

    @delay_ms.setter
    def delay_ms(self, value: float) -> None:
        if self._shared:
            self._shared.ms = value
        else:
            self._delay_ms = value

    @property
    def url(self) -> str:
        """What ``https_proxy`` (connect) or the endpoint (plain) is set to."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.close()

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                self.stats[k] += v

    def _sleep(self) -> None:
        delay = self.delay_ms
        if delay > 0:
            time.sleep(delay / 1000)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        rest = b""
        if self.connect:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    conn.close()
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            if not head.upper().startswith(b"CONNECT "):
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                conn.close()
                return
        up = socket.create_connection(self.target)
        for s in (conn, up):
            # blocking, whatever socket.setdefaulttimeout says (Beam sets one): os.splice
            # on a non-blocking socket fails with EAGAIN
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._count(tunnels=1)
        self._sleep()  # the tunnel's answer, or the TCP handshake
        if self.connect:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            up.sendall(rest)
        # the client's first turn (its TLS hello after the tunnel's answer, or its first
        # request after the handshake) is a round trip of its own
        spoke = {"server": True}
        down = threading.Thread(target=self._pump, args=(up, conn, spoke, False), daemon=True)
        down.start()
        self._pump(conn, up, spoke, True)
        down.join()
        conn.close()
        up.close()

    def _pump(self, src: socket.socket, dst: socket.socket, spoke: dict, upstream: bool) -> None:
        read, write = os.pipe()
        try:
            while True:
                if upstream:
                    select.select([src], [], [])
                    if spoke["server"]:  # a new turn of the client's: one round trip
                        spoke["server"] = False
                        self._sleep()
                n = os.splice(src.fileno(), write, 1 << 20)
                if n == 0:
                    break
                left = n
                while left:
                    left -= os.splice(read, dst.fileno(), left)
                if upstream:
                    self._count(bytes_up=n)
                else:
                    spoke["server"] = True
                    self._count(bytes_down=n)
        except OSError:
            pass
        finally:
            os.close(read)
            os.close(write)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


def main() -> None:
    """Relay until stopped; print the port first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT")
    parser.add_argument("--connect", action="store_true", help="speak HTTP CONNECT first")
    parser.add_argument("--delay-file", default="", help="a SharedDelay file")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    with DelayProxy((host, int(port)), connect=args.connect, delay_file=args.delay_file) as proxy:
        print(proxy.port, flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    sys.exit(0)


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    main()
