"""A fault-injecting HTTP proxy on 127.0.0.1 for the GCS emulators.

Forwards every request to the emulator, except on a fixed schedule, where it answers 503 or 429,
or drops the connection without answering. Bounded: it serves only while its context is open and
only the loopback address.
"""

from __future__ import annotations

import http.client
import http.server
import itertools
import threading
import urllib.parse
from collections import Counter

HOP_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "proxy-connection",
    "upgrade",
    "content-length",
    "host",
}


class FaultProxy:
    """``with FaultProxy(upstream_url, every=4) as proxy: ... proxy.url ... proxy.faults``."""

    def __init__(self, upstream: str, every: int = 4):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.every = every
        self.faults: Counter[str] = Counter()
        self.requests = 0
        self._lock = threading.Lock()
        self._schedule = itertools.cycle(["503", "429", "drop"])
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._next_fault()
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault:
                    payload = b'{"error": {"code": %s, "message": "injected"}}' % fault.encode()
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(
                    proxy.upstream.hostname, proxy.upstream.port, timeout=30
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_HEADERS:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # dropped connections are the point
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next_fault(self) -> str | None:
        with self._lock:
            self.requests += 1
            if self.requests % self.every:
                return None
            fault = next(self._schedule)
            self.faults[fault] += 1
            return fault

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
