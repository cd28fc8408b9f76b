"""S3 (``s3://``) behind the storage API: AWS S3 and S3-compatible stores, through boto3.

Conditional writes are conditional ``PutObject`` requests: ``If-None-Match: *`` creates only what
does not exist, ``If-Match`` with the ETag read before replaces only that object.

``s3://`` reaches AWS S3 and S3-compatible stores (the SeaweedFS or MinIO of a self-hosted
Kubeflow) configured the way Kubeflow passes it, as environment (from a Secret):
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), ``AWS_REGION``,
and for a store other than AWS its endpoint, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
(boto3's own variables: Beam's S3 filesystem reads the same ones). Such stores are addressed
path-style (``http://host:port/bucket/key``): in-cluster service names have no wildcard DNS.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import time
from collections.abc import Iterator
from typing import IO, Any

from tfrecord_suite.io.storage.backend import (
    FileInfo,
    ObjectStore,
    StorageError,
    timestamp,
)

PREFIX = "s3://"
#: boto3's endpoint variables, the S3-specific one first (as boto3 looks them up).
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")

#: The cached client, by the endpoint it was built for (one at a time).
_CLIENTS: dict[str, Any] = {}

_MISSING = {"NoSuchKey", "404", "NotFound"}
_LOST = {"PreconditionFailed", "412"}
# AWS's answer to a conditional write racing another one still in flight: neither has won yet,
# and the request is to be sent again
_RACING = {"ConditionalRequestConflict", "409"}
_PUT_ATTEMPTS = 8
#: DeleteObjects takes 1,000 keys at most.
_DELETE_BATCH = 1000


def endpoint() -> str:
    """The S3 endpoint boto3 will use: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; "" AWS."""
    return next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), "")


def client() -> Any:
    """A cached boto3 S3 client, configured from the environment (see the module docstring).

    Retries in boto3's ``standard`` mode (throttling, 5xx, dropped connections), 8 attempts
    (boto3's ``AWS_RETRY_MODE`` and ``AWS_MAX_ATTEMPTS`` override them). With an endpoint of its
    own (SeaweedFS, MinIO), path-style addressing, and request checksums only where the API
    requires them (the newer default checksum trailers are AWS's own).
    """
    key = endpoint()
    built = _CLIENTS.get(key)
    if built is None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StorageError("s3:// URIs need boto3: pip install 'tfrecord-suite[s3]'") from exc
        retries = {
            "mode": os.environ.get("AWS_RETRY_MODE", "standard"),
            "max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS", "8")),
        }
        options: dict[str, Any] = {"retries": retries, "max_pool_connections": 64}
        if key:
            options["s3"] = {"addressing_style": "path"}
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
        built = boto3.session.Session().client("s3", config=Config(**options))
        _CLIENTS.clear()
        _CLIENTS[key] = built
    return built


def reset_client() -> None:
    """Forget the cached client (tests point it at a new server or new credentials)."""
    _CLIENTS.clear()


def etag_checksum(etag: str) -> str:
    """The content checksum an ETag stands for.

    A single-part upload's ETag is its MD5, given as GCS gives MD5s (``md5:<base64>``) so the two
    compare; a multipart upload's is not, and is given as it is (``s3etag:<etag>``).
    """
    etag = etag.strip('"')
    if re.fullmatch(r"[0-9a-f]{32}", etag):  # a single-part upload's ETag is its MD5
        return "md5:" + base64.b64encode(bytes.fromhex(etag)).decode()
    return f"s3etag:{etag}"


def _info(uri: str, size: int, etag: str, modified: Any) -> FileInfo:
    mtime = timestamp(modified)
    bare = etag.strip('"')
    return FileInfo(uri, int(size), f"{bare}@{mtime:.6f}", mtime, etag_checksum(etag))


def _code(exc: Exception) -> str:
    """The S3 error code of a botocore ``ClientError`` ("" for other errors)."""
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    return str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _client_error() -> type[Exception]:
    from botocore.exceptions import ClientError

    return ClientError


def _transfer_config(concurrency: int = 8, chunk_mb: int = 8) -> Any:
    from boto3.s3.transfer import TransferConfig

    chunk = chunk_mb << 20
    return TransferConfig(
        multipart_threshold=chunk, multipart_chunksize=chunk, max_concurrency=concurrency
    )


def _pages(bucket: str, key: str, recursive: bool) -> Iterator[dict[str, Any]]:
    """ListObjectsV2's pages under ``key`` (with ``/`` as the delimiter unless ``recursive``)."""
    paginator = client().get_paginator("list_objects_v2")
    options = {"Bucket": bucket, "Prefix": key}
    if not recursive:
        options["Delimiter"] = "/"
    yield from paginator.paginate(**options)


class S3(ObjectStore):
    """Objects in S3 buckets, on AWS or an S3-compatible server."""

    prefix = PREFIX
    label = "an s3:// URI"
    title = "S3"

    def reset(self) -> None:
        """Forget the cached client."""
        reset_client()

    def read_with_token(self, uri: str) -> tuple[bytes, str] | tuple[None, None]:
        """The content and its ETag."""
        bucket, key = self.split(uri)
        try:
            answer = client().get_object(Bucket=bucket, Key=key)
        except _client_error() as exc:
            if _code(exc) in _MISSING:
                return None, None
            raise
        return answer["Body"].read(), answer["ETag"]

    def _put(self, uri: str, data: bytes, **condition: str) -> str:
        """PutObject, with ``IfNoneMatch``/``IfMatch`` when given; the new ETag.

        Raises:
            PreconditionFailed: The condition failed, and ``uri`` does not hold ``data`` (a
                retried request whose first attempt landed sees its own write fail the
                condition).

        """
        bucket, key = self.split(uri)
        for attempt in range(_PUT_ATTEMPTS):
            try:
                return client().put_object(Bucket=bucket, Key=key, Body=data, **condition)["ETag"]
            except _client_error() as exc:
                code = _code(exc)
                if code in _RACING and attempt < _PUT_ATTEMPTS - 1:
                    time.sleep(0.05 * 2**attempt)
                    continue
                if code not in _LOST | _RACING:
                    raise
                return self.ours_or_lost(uri, data, exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def write_bytes(self, uri: str, data: bytes) -> None:
        """PutObject: S3 replaces an object whole, so readers see old or new."""
        self._put(uri, data)

    def compare_and_swap(self, uri: str, data: bytes, expected_token: str | None) -> str:
        """A conditional PutObject on the ETag read (``If-None-Match: *`` for none)."""
        if expected_token is None:
            return self._put(uri, data, IfNoneMatch="*")
        return self._put(uri, data, IfMatch=expected_token)

    def delete(self, uri: str, missing_ok: bool) -> None:
        """DeleteObject (which deletes a missing key without a word: checked first)."""
        if not missing_ok:
            self.stat(uri)
        bucket, key = self.split(uri)
        client().delete_object(Bucket=bucket, Key=key)

    def delete_tree(self, prefix: str) -> int:
        """DeleteObjects, a thousand keys a request."""
        files = self.list_files(prefix, recursive=True)
        bucket, _ = self.split(prefix)
        for start in range(0, len(files), _DELETE_BATCH):
            keys = [{"Key": self.split(f.uri)[1]} for f in files[start : start + _DELETE_BATCH]]
            answer = client().delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            if answer.get("Errors"):
                raise StorageError(f"{prefix}: could not delete {answer['Errors'][:3]}")
        return len(files)

    def list_files(self, prefix: str, recursive: bool) -> list[FileInfo]:
        """The keys under ``prefix`` (one level of it unless ``recursive``)."""
        bucket, key = self.folder(prefix)
        out = []
        for page in _pages(bucket, key, recursive):
            for o in page.get("Contents", []):
                if not o["Key"].endswith("/"):
                    uri = f"s3://{bucket}/{o['Key']}"
                    out.append(_info(uri, o["Size"], o["ETag"], o["LastModified"]))
        return sorted(out, key=lambda f: f.uri)

    def list_dirs(self, prefix: str) -> list[str]:
        """The common prefixes one level under ``prefix``."""
        bucket, key = self.folder(prefix)
        names = (
            p["Prefix"][len(key) :].rstrip("/")
            for page in _pages(bucket, key, recursive=False)
            for p in page.get("CommonPrefixes", [])
        )
        return sorted(names)

    def stat(self, uri: str) -> FileInfo:
        """HeadObject."""
        bucket, key = self.split(uri)
        try:
            head = client().head_object(Bucket=bucket, Key=key)
        except _client_error() as exc:
            if _code(exc) in _MISSING:
                raise FileNotFoundError(uri) from exc
            raise
        return _info(uri, head["ContentLength"], head["ETag"], head["LastModified"])

    @contextlib.contextmanager
    def open_read(self, uri: str) -> Iterator[IO[bytes]]:
        """GetObject's streaming body."""
        bucket, key = self.split(uri)
        try:
            body = client().get_object(Bucket=bucket, Key=key)["Body"]
        except _client_error() as exc:
            if _code(exc) in _MISSING:
                raise FileNotFoundError(uri) from exc
            raise
        try:
            yield body
        finally:
            body.close()

    def download(self, uri: str, path: str, concurrency: int, chunk_mb: int) -> None:
        """Ranged GETs of ``chunk_mb`` MiB, ``concurrency`` at once (boto3's transfer manager)."""
        bucket, key = self.split(uri)
        client().download_file(bucket, key, path, Config=_transfer_config(concurrency, chunk_mb))

    def upload(self, path: str, uri: str) -> None:
        """boto3's transfer manager: multipart above 8 MiB."""
        bucket, key = self.split(uri)
        client().upload_file(path, bucket, key, Config=_transfer_config())

    def copy(self, src: str, dst: str) -> None:
        """CopyObject (multipart for large objects) through boto3's transfer manager."""
        (src_bucket, src_key), (bucket, key) = self.split(src), self.split(dst)
        source = {"Bucket": src_bucket, "Key": src_key}
        client().copy(source, bucket, key, Config=_transfer_config())
