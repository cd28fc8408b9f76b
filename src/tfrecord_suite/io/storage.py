"""One storage API for local folders, ``gs://`` and ``s3://`` URIs.

Everything the suite persists (shards, manifests, aliases, metrics) goes through this module, so a
local folder can stand in for a bucket in tests and demos and nothing else changes in production.

Two primitives carry the correctness guarantees of the registry:

* :func:`create_if_absent` writes an object only if no object exists at that name, atomically: on
  GCS with the ``if_generation_match=0`` precondition, on S3 with a conditional ``PutObject``
  (``If-None-Match: *``), locally by hard-linking a fully written temporary file into place
  (``link`` fails if the target exists, and readers never see a partial file).
* :func:`compare_and_swap` replaces an object only if it still holds the version the caller read
  (GCS generation, S3 ETag through ``If-Match``, or a content digest locally under an exclusive
  lock), so concurrent alias updates never lose a write.

``s3://`` reaches AWS S3 and S3-compatible stores (the SeaweedFS or MinIO of a self-hosted
Kubeflow) through boto3, configured the way Kubeflow passes it, as environment (from a Secret):
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), ``AWS_REGION``,
and for a store other than AWS its endpoint, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
(boto3's own variables: Beam's S3 filesystem reads the same ones). Such stores are addressed
path-style (``http://host:port/bucket/key``): in-cluster service names have no wildcard DNS.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any

from tfrecord_suite.errors import UserError

GCS_PREFIX = "gs://"
S3_PREFIX = "s3://"
#: boto3's endpoint variables, the S3-specific one first (as boto3 looks them up).
S3_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_READ_CHUNK = 8 * 1024 * 1024

#: Bytes and objects :func:`copy` has duplicated in this process, so callers (and tests) can
#: show that an operation meant to be zero-copy copied nothing. Links are not copies.
_COPIED = {"bytes": 0, "objects": 0}


class StorageError(RuntimeError):
    """A storage operation failed; the message names the URI."""


class PreconditionFailed(StorageError):
    """An atomic create or compare-and-swap lost against a concurrent writer."""


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """What a listing knows about one object.

    Attributes:
        uri: Full URI (local absolute path, ``gs://bucket/name`` or ``s3://bucket/key``).
        size: Size in bytes.
        generation: GCS generation, S3's ETag and modification time, or the modification time
            in nanoseconds locally: it changes on every write, even of the same bytes.
        mtime: Modification time (seconds).
        checksum: What the store knows of the content without reading it: GCS's MD5
            (``md5:<base64>``) or, for composite objects that have none, its CRC32C
            (``crc32c:<base64>``); on S3 the MD5 a single-part upload's ETag is (``md5:<base64>``,
            comparable with GCS's) or a multipart upload's ETag (``s3etag:<etag>``); empty
            locally.

    """

    uri: str
    size: int
    generation: str
    mtime: float = 0.0
    checksum: str = ""


def is_gcs(uri: str) -> bool:
    """Whether ``uri`` names a Google Cloud Storage object or prefix."""
    return uri.startswith(GCS_PREFIX)


def is_s3(uri: str) -> bool:
    """Whether ``uri`` names an S3 (or S3-compatible) object or prefix."""
    return uri.startswith(S3_PREFIX)


def is_remote(uri: str) -> bool:
    """Whether ``uri`` is in an object store (``gs://`` or ``s3://``), not a local path."""
    return is_gcs(uri) or is_s3(uri)


def join(base: str, *parts: str) -> str:
    """Join URI parts with ``/`` in object stores and the OS separator locally."""
    if is_remote(base):
        out = base.rstrip("/")
        for part in parts:
            out = f"{out}/{part.strip('/')}"
        return out
    return os.path.join(base, *parts)


class UnsupportedStorage(StorageError, UserError):
    """A URI whose scheme this storage layer cannot reach (folders, gs:// and s3://)."""


_SCHEME_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def check_reachable(uri: str, what: str = "path") -> str:
    """Return ``uri`` if this storage layer can reach it (a folder, ``file://``, gs://, s3://).

    Raises:
        UnsupportedStorage: Any other scheme (``minio://``, ``abfs://``...), naming it.

    """
    m = _SCHEME_RE.match(uri)
    if m and m[1].lower() not in ("gs", "s3", "file"):
        hint = (
            "MinIO and SeaweedFS speak S3: give s3://BUCKET/... and their endpoint in "
            "AWS_ENDPOINT_URL"
            if m[1].lower() == "minio"
            else "put the data and registries on GCS, S3 or a mounted folder"
        )
        raise UnsupportedStorage(
            f"{what} {uri}: {m[1]}:// is not a storage this suite reads or writes (it reaches "
            f"local folders, gs:// and s3://); {hint}"
        )
    return uri


def normalize(uri: str) -> str:
    """Return an absolute local path, or the object store URI without a trailing slash.

    Raises:
        UnsupportedStorage: ``uri`` has a scheme other than ``gs://``, ``s3://`` or ``file://``,
            which would otherwise become a bogus local path.

    """
    if is_remote(uri):
        return uri.rstrip("/") if uri.count("/") > 2 else uri
    check_reachable(uri)
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return os.path.abspath(os.path.expanduser(uri))


def basename(uri: str) -> str:
    """Last path component of a URI."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


def parent(uri: str) -> str:
    """The URI one level up."""
    return uri.rstrip("/").rsplit("/", 1)[0]


def relative_to(uri: str, base: str) -> str:
    """``uri`` relative to ``base`` using ``/`` separators."""
    base = base.rstrip("/") + "/"
    if not uri.startswith(base):
        raise StorageError(f"{uri} is not under {base}")
    return uri[len(base) :]


# --------------------------------------------------------------------------------------------- GCS


def _split_gcs(uri: str) -> tuple[str, str]:
    rest = uri[len(GCS_PREFIX) :]
    bucket, _, name = rest.partition("/")
    if not bucket:
        raise StorageError(f"{uri}: a gs:// URI needs a bucket name")
    return bucket, name


_CLIENT: Any = None


def gcs_client() -> Any:
    """A cached ``google.cloud.storage.Client``; anonymous when ``STORAGE_EMULATOR_HOST`` is set."""
    global _CLIENT
    if _CLIENT is None:
        try:
            from google.cloud import storage
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StorageError(
                "gs:// URIs need google-cloud-storage: pip install 'tfrecord-suite[gcs]'"
            ) from exc
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            _CLIENT = storage.Client(
                project=os.environ.get("GOOGLE_CLOUD_PROJECT", "emulator"),
                credentials=AnonymousCredentials(),
            )
        else:
            _CLIENT = storage.Client()
    return _CLIENT


def reset_gcs_client() -> None:
    """Forget the cached client (tests point it at a new emulator)."""
    global _CLIENT
    _CLIENT = None


def _blob(uri: str) -> Any:
    bucket, name = _split_gcs(uri)
    return gcs_client().bucket(bucket).blob(name)


def _retry() -> Any:
    """GCS's retry policy (429, 5xx, dropped connections) with a faster first backoff."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_delay(initial=0.25, maximum=16.0, multiplier=2.0)


def _gcs_errors() -> tuple[type[Exception], type[Exception]]:
    from google.api_core import exceptions

    return exceptions.NotFound, exceptions.PreconditionFailed


# ---------------------------------------------------------------------------------------------- S3


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len(S3_PREFIX) :].partition("/")
    if not bucket:
        raise StorageError(f"{uri}: an s3:// URI needs a bucket name")
    return bucket, key


_S3: dict[str, Any] = {}


def s3_endpoint() -> str:
    """The S3 endpoint boto3 will use: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; "" AWS."""
    return next((os.environ[k] for k in S3_ENDPOINT_ENV if os.environ.get(k)), "")


def s3_client() -> Any:
    """A cached boto3 S3 client, configured from the environment (see the module docstring).

    Retries in boto3's ``standard`` mode (throttling, 5xx, dropped connections), 8 attempts
    (boto3's ``AWS_RETRY_MODE`` and ``AWS_MAX_ATTEMPTS`` override them). With an endpoint of its
    own (SeaweedFS, MinIO), path-style addressing, and request checksums only where the API
    requires them (the newer default checksum trailers are AWS's own).
    """
    key = s3_endpoint()
    client = _S3.get(key)
    if client is None:
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
        client = boto3.session.Session().client("s3", config=Config(**options))
        _S3.clear()
        _S3[key] = client
    return client


def reset_s3_client() -> None:
    """Forget the cached client (tests point it at a new server or new credentials)."""
    _S3.clear()


@contextlib.contextmanager
def environment(env: dict[str, str], unset: tuple[str, ...] = ()) -> Iterator[None]:
    """The store clients built from ``env`` meanwhile (endpoints, credentials), then as before.

    ``env`` is set over the process's environment (the variables in ``unset`` removed first),
    the cached GCS and S3 clients are forgotten on entry and on exit, and the environment is
    restored on exit.
    """
    old = {k: os.environ.get(k) for k in (*env, *unset)}
    for k in unset:
        os.environ.pop(k, None)
    os.environ.update(env)
    reset_gcs_client()
    reset_s3_client()
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_gcs_client()
        reset_s3_client()


def _s3_code(exc: Exception) -> str:
    """The S3 error code of a botocore ``ClientError`` ("" for other errors)."""
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    return str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _s3_client_error() -> type[Exception]:
    from botocore.exceptions import ClientError

    return ClientError


_S3_MISSING = {"NoSuchKey", "404", "NotFound"}
_S3_LOST = {"PreconditionFailed", "412"}
# AWS's answer to a conditional write racing another one still in flight: neither has won yet,
# and the request is to be sent again
_S3_RACING = {"ConditionalRequestConflict", "409"}


def _s3_get(uri: str) -> tuple[bytes, str] | tuple[None, None]:
    bucket, key = _split_s3(uri)
    try:
        answer = s3_client().get_object(Bucket=bucket, Key=key)
    except _s3_client_error() as exc:
        if _s3_code(exc) in _S3_MISSING:
            return None, None
        raise
    return answer["Body"].read(), answer["ETag"]


def _s3_put(uri: str, data: bytes, **condition: str) -> str:
    """PutObject, with ``IfNoneMatch``/``IfMatch`` when given; the new ETag.

    Raises:
        PreconditionFailed: The condition failed, and ``uri`` does not hold ``data`` (a retried
            request whose first attempt landed sees its own write fail the condition).

    """
    bucket, key = _split_s3(uri)
    for attempt in range(8):
        try:
            return s3_client().put_object(Bucket=bucket, Key=key, Body=data, **condition)["ETag"]
        except _s3_client_error() as exc:
            code = _s3_code(exc)
            if code in _S3_RACING and attempt < 7:
                time.sleep(0.05 * 2**attempt)
                continue
            if code not in _S3_LOST | _S3_RACING:
                raise
            current, token = _s3_get(uri)
            if current == data:
                return str(token)
            raise PreconditionFailed(f"{uri} changed concurrently; re-read and retry") from exc
    raise AssertionError("unreachable")  # pragma: no cover


def _s3_checksum(etag: str) -> str:
    etag = etag.strip('"')
    if re.fullmatch(r"[0-9a-f]{32}", etag):  # a single-part upload's ETag is its MD5
        import base64

        return "md5:" + base64.b64encode(bytes.fromhex(etag)).decode()
    return f"s3etag:{etag}"


def _s3_info(uri: str, size: int, etag: str, modified: Any) -> FileInfo:
    mtime = _ts(modified)
    bare = etag.strip('"')
    return FileInfo(uri, int(size), f"{bare}@{mtime:.6f}", mtime, _s3_checksum(etag))


def _s3_transfer_config(concurrency: int = 8, chunk_mb: int = 8) -> Any:
    from boto3.s3.transfer import TransferConfig

    chunk = chunk_mb << 20
    return TransferConfig(
        multipart_threshold=chunk, multipart_chunksize=chunk, max_concurrency=concurrency
    )


# ------------------------------------------------------------------------------------- public API


def exists(uri: str) -> bool:
    """Whether an object (or, locally, a file or folder) exists at ``uri``."""
    if is_gcs(uri):
        return bool(_blob(uri).exists(retry=_retry()))
    if is_s3(uri):
        try:
            stat(uri)
        except FileNotFoundError:
            return False
        return True
    return os.path.exists(uri)


def read_bytes(uri: str) -> bytes:
    """The whole content of ``uri``.

    Raises:
        FileNotFoundError: Nothing exists at ``uri``.

    """
    if is_gcs(uri):
        not_found, _ = _gcs_errors()
        try:
            return _blob(uri).download_as_bytes(retry=_retry())
        except not_found as exc:
            raise FileNotFoundError(uri) from exc
    if is_s3(uri):
        data, _ = _s3_get(uri)
        if data is None:
            raise FileNotFoundError(uri)
        return data
    with open(uri, "rb") as fh:
        return fh.read()


def read_text(uri: str) -> str:
    """The content of ``uri`` decoded as UTF-8."""
    return read_bytes(uri).decode("utf-8")


def read_with_token(uri: str) -> tuple[bytes, str] | tuple[None, None]:
    """Content and a version token for :func:`compare_and_swap`; ``(None, None)`` if absent."""
    if is_gcs(uri):
        not_found, _ = _gcs_errors()
        blob = _blob(uri)
        try:
            data = blob.download_as_bytes(retry=_retry())
        except not_found:
            return None, None
        return data, str(blob.generation)
    if is_s3(uri):
        return _s3_get(uri)
    try:
        with open(uri, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None, None
    return data, hashlib.sha256(data).hexdigest()


def write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri``, replacing it; readers see old or new content, never a mix."""
    if is_gcs(uri):
        _blob(uri).upload_from_string(data, retry=_retry())
        return
    if is_s3(uri):
        _s3_put(uri, data)  # S3 replaces an object whole: readers see old or new
        return
    _atomic_local_write(uri, data, replace=True)


def write_text(uri: str, text: str) -> None:
    """Write UTF-8 text to ``uri`` (see :func:`write_bytes`)."""
    write_bytes(uri, text.encode("utf-8"))


def create_if_absent(uri: str, data: bytes) -> bool:
    """Atomically create ``uri`` with ``data`` unless something already exists there.

    Returns:
        True if this call created the object, False if it already existed (the existing object is
        left untouched).

    """
    if is_gcs(uri):
        _, precondition = _gcs_errors()
        try:
            _blob(uri).upload_from_string(data, if_generation_match=0, retry=_retry())
        except precondition:
            # A retried request whose first attempt did land also sees 412: it is ours if the
            # object holds exactly our bytes (manifests are unique per attempt).
            return read_with_token(uri)[0] == data
        return True
    if is_s3(uri):
        try:
            _s3_put(uri, data, IfNoneMatch="*")
        except PreconditionFailed:
            return False
        return True
    try:
        _atomic_local_write(uri, data, replace=False)
    except FileExistsError:
        return False
    return True


def compare_and_swap(uri: str, data: bytes, expected_token: str | None) -> str:
    """Replace ``uri`` with ``data`` only if it still has ``expected_token``.

    Args:
        uri: Object to update.
        data: New content.
        expected_token: Token from :func:`read_with_token`; None means "must not exist yet".

    Returns:
        The new token.

    Raises:
        PreconditionFailed: Someone else changed (or created) the object since it was read.

    """
    if is_gcs(uri):
        _, precondition = _gcs_errors()
        blob = _blob(uri)
        match = 0 if expected_token is None else int(expected_token)
        try:
            blob.upload_from_string(data, if_generation_match=match, retry=_retry())
        except precondition as exc:
            current, token = read_with_token(uri)
            if current == data:  # our first attempt landed and a retry saw its generation
                return str(token)
            raise PreconditionFailed(f"{uri} changed concurrently; re-read and retry") from exc
        return str(blob.generation)
    if is_s3(uri):
        if expected_token is None:
            return _s3_put(uri, data, IfNoneMatch="*")
        return _s3_put(uri, data, IfMatch=expected_token)
    os.makedirs(os.path.dirname(uri) or ".", exist_ok=True)
    with _local_lock(uri):
        _, current = read_with_token(uri)
        if current != expected_token:
            raise PreconditionFailed(f"{uri} changed concurrently; re-read and retry")
        _atomic_local_write(uri, data, replace=True)
    return hashlib.sha256(data).hexdigest()


def delete(uri: str, missing_ok: bool = True) -> None:
    """Delete one object (or local file)."""
    if is_gcs(uri):
        not_found, _ = _gcs_errors()
        try:
            _blob(uri).delete(retry=_retry())
        except not_found:
            if not missing_ok:
                raise
        return
    if is_s3(uri):
        if not missing_ok:
            stat(uri)  # S3 deletes a missing key without a word
        bucket, key = _split_s3(uri)
        s3_client().delete_object(Bucket=bucket, Key=key)
        return
    try:
        os.remove(uri)
    except FileNotFoundError:
        if not missing_ok:
            raise


def delete_tree(prefix: str) -> int:
    """Delete every object under ``prefix``; returns how many were deleted."""
    files = list_files(prefix)
    if is_s3(prefix):
        bucket, _ = _split_s3(prefix)
        for start in range(0, len(files), 1000):  # DeleteObjects takes 1,000 keys at most
            keys = [{"Key": _split_s3(f.uri)[1]} for f in files[start : start + 1000]]
            answer = s3_client().delete_objects(
                Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
            )
            if answer.get("Errors"):
                raise StorageError(f"{prefix}: could not delete {answer['Errors'][:3]}")
        return len(files)
    for info in files:
        delete(info.uri)
    if not is_remote(prefix) and os.path.isdir(prefix):
        shutil.rmtree(prefix, ignore_errors=True)
    return len(files)


def list_files(prefix: str, recursive: bool = True) -> list[FileInfo]:
    """Objects under the folder ``prefix``, sorted by URI.

    Locally, hidden files (this module's ``.tmp-*`` temporaries and ``.*.lock`` files) are skipped.
    """
    if is_gcs(prefix):
        bucket, name = _split_gcs(prefix.rstrip("/") + "/")
        if name == "/":
            name = ""
        blobs = gcs_client().list_blobs(
            bucket, prefix=name, delimiter=None if recursive else "/", retry=_retry()
        )
        out = [
            FileInfo(
                f"gs://{bucket}/{b.name}",
                int(b.size or 0),
                str(b.generation),
                _ts(b.updated),
                _gcs_checksum(b),
            )
            for b in blobs
            if not b.name.endswith("/")
        ]
        return sorted(out, key=lambda f: f.uri)
    if is_s3(prefix):
        bucket, key = _split_s3(prefix.rstrip("/") + "/")
        key = "" if key == "/" else key
        out = []
        for page in _s3_pages(bucket, key, recursive):
            for o in page.get("Contents", []):
                if not o["Key"].endswith("/"):
                    uri = f"s3://{bucket}/{o['Key']}"
                    out.append(_s3_info(uri, o["Size"], o["ETag"], o["LastModified"]))
        return sorted(out, key=lambda f: f.uri)
    if not os.path.isdir(prefix):
        return []
    out = []
    for root, dirs, names in os.walk(prefix):
        dirs.sort()
        if not recursive:
            dirs[:] = []
        for n in names:
            if n.startswith("."):
                continue
            path = os.path.join(root, n)
            st = os.stat(path)
            out.append(FileInfo(path, st.st_size, str(st.st_mtime_ns), st.st_mtime))
    return sorted(out, key=lambda f: f.uri)


def list_dirs(prefix: str) -> list[str]:
    """Names of the immediate sub-folders of ``prefix`` (GCS: common prefixes)."""
    if is_gcs(prefix):
        bucket, name = _split_gcs(prefix.rstrip("/") + "/")
        it = gcs_client().list_blobs(bucket, prefix=name, delimiter="/", retry=_retry())
        for _ in it:  # prefixes are only populated once the pages are consumed
            pass
        return sorted(p[len(name) :].rstrip("/") for p in it.prefixes)
    if is_s3(prefix):
        bucket, key = _split_s3(prefix.rstrip("/") + "/")
        key = "" if key == "/" else key
        names = (
            p["Prefix"][len(key) :].rstrip("/")
            for page in _s3_pages(bucket, key, recursive=False)
            for p in page.get("CommonPrefixes", [])
        )
        return sorted(names)
    if not os.path.isdir(prefix):
        return []
    return sorted(e.name for e in os.scandir(prefix) if e.is_dir() and not e.name.startswith("."))


def _s3_pages(bucket: str, key: str, recursive: bool) -> Iterator[dict[str, Any]]:
    """ListObjectsV2's pages under ``key`` (with ``/`` as the delimiter unless ``recursive``)."""
    paginator = s3_client().get_paginator("list_objects_v2")
    options = {"Bucket": bucket, "Prefix": key}
    if not recursive:
        options["Delimiter"] = "/"
    yield from paginator.paginate(**options)


def stat(uri: str) -> FileInfo:
    """Size and generation of one object."""
    if is_gcs(uri):
        bucket, name = _split_gcs(uri)
        blob = gcs_client().bucket(bucket).get_blob(name, retry=_retry())
        if blob is None:
            raise FileNotFoundError(uri)
        return FileInfo(
            uri, int(blob.size or 0), str(blob.generation), _ts(blob.updated), _gcs_checksum(blob)
        )
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        try:
            head = s3_client().head_object(Bucket=bucket, Key=key)
        except _s3_client_error() as exc:
            if _s3_code(exc) in _S3_MISSING:
                raise FileNotFoundError(uri) from exc
            raise
        return _s3_info(uri, head["ContentLength"], head["ETag"], head["LastModified"])
    st = os.stat(uri)
    return FileInfo(uri, st.st_size, str(st.st_mtime_ns), st.st_mtime)


def _gcs_checksum(blob: Any) -> str:
    if blob.md5_hash:
        return f"md5:{blob.md5_hash}"
    return f"crc32c:{blob.crc32c}" if blob.crc32c else ""


def content_id(info: FileInfo) -> str:
    """A content identity of an object: the store's checksum, or a sha256 read locally.

    Unlike the generation, it stays the same when the same bytes are written again.
    """
    return info.checksum or f"sha256:{sha256(info.uri)}"


def _ts(when: Any) -> float:
    return when.timestamp() if when is not None else 0.0


def bytes_copied() -> int:
    """Bytes duplicated by :func:`copy` in this process so far (take a difference to measure)."""
    return _COPIED["bytes"]


def link_or_copy(src: str, dst: str) -> bool:
    """Make ``dst`` hold ``src``'s bytes, by a hard link when both are local on one filesystem.

    A link adds a name, not bytes, and the two names share one inode (the file exists once).
    Anywhere else (object stores, across filesystems, a filesystem without links) the object is
    copied.

    Returns:
        True when linked, False when copied.

    """
    if not is_remote(src) and not is_remote(dst):
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        try:
            os.link(src, dst)
            # the new name counts as new data for age-based cleanup (gc): its time is now
            os.utime(dst)
            return True
        except FileExistsError:
            if os.path.samefile(src, dst):
                return True
            raise
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
    copy(src, dst)
    return False


def copy(src: str, dst: str) -> None:
    """Copy one object; server-side within one store, never through a partial ``dst``.

    Every copy is counted (:func:`bytes_copied`).
    """
    _copy(src, dst)
    _COPIED["bytes"] += stat(dst).size
    _COPIED["objects"] += 1


def _copy(src: str, dst: str) -> None:
    if is_gcs(src) and is_gcs(dst):
        src_blob, dst_blob = _blob(src), _blob(dst)
        token, _, _ = dst_blob.rewrite(src_blob, retry=_retry())
        while token is not None:
            token, _, _ = dst_blob.rewrite(src_blob, token=token, retry=_retry())
        return
    if is_s3(src) and is_s3(dst):
        (src_bucket, src_key), (bucket, key) = _split_s3(src), _split_s3(dst)
        s3_client().copy(
            {"Bucket": src_bucket, "Key": src_key}, bucket, key, Config=_s3_transfer_config()
        )
        return
    if is_remote(src) and is_remote(dst):  # across stores: through a local temporary file
        with tempfile.TemporaryDirectory(prefix="tfrs-copy-") as folder:
            local = os.path.join(folder, basename(src))
            download(src, local)
            _copy(local, dst)
        return
    if is_gcs(dst):
        _blob(dst).upload_from_filename(src, retry=_retry())
    elif is_s3(dst):
        bucket, key = _split_s3(dst)
        s3_client().upload_file(src, bucket, key, Config=_s3_transfer_config())
    else:  # into a local file (from a store or another local file)
        download(src, dst)


def download(uri: str, path: str, concurrency: int = 8, chunk_mb: int = 8) -> None:
    """Fetch the object ``uri`` into the local file ``path``, never leaving a partial ``path``.

    On S3 in ranged GETs of ``chunk_mb`` MiB, ``concurrency`` at once (boto3's transfer
    manager), so one object's download hides the round trips of its parts; on GCS in one GET.
    Not counted by :func:`bytes_copied` (a download is a read).
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = _tmp_name(path)
    try:
        if is_gcs(uri):
            _blob(uri).download_to_filename(tmp, retry=_retry())
        elif is_s3(uri):
            bucket, key = _split_s3(uri)
            s3_client().download_file(
                bucket, key, tmp, Config=_s3_transfer_config(concurrency, chunk_mb)
            )
        else:
            shutil.copyfile(uri, tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


@contextlib.contextmanager
def open_read(uri: str) -> Iterator[IO[bytes]]:
    """A binary, streaming reader for ``uri``."""
    if is_gcs(uri):
        with _blob(uri).open("rb", retry=_retry()) as fh:
            yield fh
    elif is_s3(uri):
        bucket, key = _split_s3(uri)
        try:
            body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        except _s3_client_error() as exc:
            if _s3_code(exc) in _S3_MISSING:
                raise FileNotFoundError(uri) from exc
            raise
        try:
            yield body
        finally:
            body.close()
    else:
        with open(uri, "rb") as fh:
            yield fh


def sha256(uri: str) -> str:
    """Hex SHA-256 of the object's content, streamed."""
    digest = hashlib.sha256()
    with open_read(uri) as fh:
        while chunk := fh.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def makedirs(uri: str) -> None:
    """Create a local folder (no-op in object stores, where folders are implicit)."""
    if not is_remote(uri):
        os.makedirs(uri, exist_ok=True)


def local_path_or_none(uri: str) -> str | None:
    """The local path for a local URI, None in an object store."""
    return None if is_remote(uri) else normalize(uri)


# ----------------------------------------------------------------------------------------- local


def _tmp_name(path: str) -> str:
    return os.path.join(os.path.dirname(path) or ".", f".tmp-{uuid.uuid4().hex}")


def _atomic_local_write(path: str, data: bytes, replace: bool) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path) or ".")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; published files are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # raises FileExistsError: the create-if-absent primitive
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


@contextlib.contextmanager
def _local_lock(path: str) -> Iterator[None]:
    lock_path = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.lock")
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
