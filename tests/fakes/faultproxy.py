"""A fault-injecting HTTP proxy on 127.0.0.1 for the GCS emulators, the S3 server and the real
Kubernetes API server (tests/realparts), which no healthy server answers with a 429 or a 5xx.

Forwards every request to the server (over TLS where its URL is https), except the ``first``
ones it is given and then on a fixed schedule, where it answers 503 or 429 (or 500), drops the
connection without answering (``drop``), or forwards the request and then drops the connection
without the answer (``lost``: the write landed, the client cannot know). Bounded: it serves only
while its context is open and only the loopback address.

For S3 (``s3=True``) it keeps the client's ``Host`` header, which the request's signature covers,
answers errors in S3's XML, and AWS's schedule: S3 asks clients to slow down with 503 ``SlowDown``,
never 429.
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
    """``with FaultProxy(upstream_url, every=4) as proxy: ... proxy.url ... proxy.faults``.

    ``first``: the faults (``"503"``, ``"drop"``, ...) answered to the first requests, before
    the schedule; ``every=0``: no schedule. ``ca_file``: the CA an https upstream is checked
    against. ``s3``: the S3 server's schedule and error answers.
    """

    GCS_SCHEDULE = ("503", "429", "drop")
    S3_SCHEDULE = ("503", "lost", "500", "drop")

    def __init__(
        self,
        upstream: str,
        every: int = 4,
        first: tuple[str, ...] = (),
        ca_file: str = "",
        s3: bool = False,
    ):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.every = every
        self.s3 = s3
        self._first = list(first)
        self._ssl = None
        if self.upstream.scheme == "https":
            import ssl

            self._ssl = ssl.create_default_context(cafile=ca_file or None)
        self.faults: Counter[str] = Counter()
        self.requests = 0
        self._lock = threading.Lock()
        self._schedule = itertools.cycle(self.S3_SCHEDULE if s3 else self.GCS_SCHEDULE)
        hop = HOP_HEADERS - {"host"} if s3 else HOP_HEADERS
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
                if fault and fault != "lost":
                    self._answer_fault(int(fault))
                    return
                if proxy._ssl is not None:
                    conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                        proxy.upstream.hostname, proxy.upstream.port, timeout=30,
                        context=proxy._ssl,
                    )  # fmt: skip
                else:
                    conn = http.client.HTTPConnection(
                        proxy.upstream.hostname, proxy.upstream.port, timeout=30
                    )
                headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if fault == "lost":
                    conn.close()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_HEADERS:
                        self.send_header(k, v)
                # a HEAD answer's length is the object's, not of its (empty) body
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def _answer_fault(self, status):
                if proxy.s3:
                    code = "SlowDown" if status == 503 else "InternalError"
                    payload = b"<Error><Code>%s</Code><Message>injected</Message></Error>" % (
                        code.encode()
                    )
                    kind = "application/xml"
                else:
                    payload = b'{"error": {"code": %d, "message": "injected"}}' % status
                    kind = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # dropped connections are the point
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next_fault(self) -> str | None:
        with self._lock:
            self.requests += 1
            if self._first:
                fault = self._first.pop(0)
            elif not self.every or self.requests % self.every:
                return None
            else:
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
