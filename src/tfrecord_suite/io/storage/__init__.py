"""One storage API for local folders, ``gs://`` and ``s3://`` URIs.

Everything the suite persists (shards, manifests, aliases, metrics) goes through this package, so
a local folder can stand in for a bucket in tests and demos and nothing else changes in
production.

This module is the face: each operation picks the backend for its URI's scheme once
(:func:`backend_for`, from the :data:`BACKENDS` table; anything else is a local path) and hands
the URI to it. The backends are one module each, implementing :class:`~.backend.Backend`:
:mod:`.local` (folders), :mod:`.gcs` (``gs://``, google-cloud-storage) and :mod:`.s3` (``s3://``,
boto3; its docstring says how an S3-compatible store is configured). A new store is one module
and one line in :data:`BACKENDS`. What crosses stores (copies, downloads, links) stays here.

Two primitives carry the correctness guarantees of the registry:

* :func:`create_if_absent` writes an object only if no object exists at that name, atomically: on
  GCS with the ``if_generation_match=0`` precondition, on S3 with a conditional ``PutObject``
  (``If-None-Match: *``), locally by hard-linking a fully written temporary file into place
  (``link`` fails if the target exists, and readers never see a partial file).
* :func:`compare_and_swap` replaces an object only if it still holds the version the caller read
  (GCS generation, S3 ETag through ``If-Match``, or a content digest locally under an exclusive
  lock), so concurrent alias updates never lose a write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from typing import IO

from tfrecord_suite.io.storage import gcs, local, s3
from tfrecord_suite.io.storage.backend import (
    Backend,
    FileInfo,
    ObjectStore,
    PreconditionFailed,
    StorageError,
    UnsupportedStorage,
)

__all__ = [
    "BACKENDS",
    "GCS_PREFIX",
    "S3_ENDPOINT_ENV",
    "S3_PREFIX",
    "Backend",
    "FileInfo",
    "ObjectStore",
    "PreconditionFailed",
    "StorageError",
    "UnsupportedStorage",
    "backend_for",
    "basename",
    "bytes_copied",
    "check_reachable",
    "compare_and_swap",
    "content_id",
    "copy",
    "create_if_absent",
    "delete",
    "delete_tree",
    "download",
    "environment",
    "exists",
    "gcs_client",
    "is_gcs",
    "is_remote",
    "is_s3",
    "join",
    "link_or_copy",
    "list_dirs",
    "list_files",
    "local_path_or_none",
    "makedirs",
    "normalize",
    "open_read",
    "parent",
    "read_bytes",
    "read_text",
    "read_with_token",
    "relative_to",
    "reset_gcs_client",
    "reset_s3_client",
    "s3_client",
    "s3_endpoint",
    "sha256",
    "stat",
    "write_bytes",
    "write_text",
]

#: The object stores by URI scheme; any URI without one of these schemes is a local path.
BACKENDS: dict[str, ObjectStore] = {"gs": gcs.GCS(), "s3": s3.S3()}
LOCAL = local.Local()

GCS_PREFIX = gcs.PREFIX
S3_PREFIX = s3.PREFIX
TEMP_PREFIX = local.TEMP_PREFIX
S3_ENDPOINT_ENV = s3.ENDPOINT_ENV
gcs_client = gcs.client
reset_gcs_client = gcs.reset_client
s3_client = s3.client
reset_s3_client = s3.reset_client
s3_endpoint = s3.endpoint

_READ_CHUNK = 8 * 1024 * 1024
_SCHEME_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")

#: Bytes and objects :func:`copy` has duplicated in this process, so callers (and tests) can
#: show that an operation meant to be zero-copy copied nothing. Links are not copies.
_COPIED = {"bytes": 0, "objects": 0}


# ------------------------------------------------------------------------------------- URIs


def backend_for(uri: str) -> Backend:
    """The backend of ``uri``'s store: by its scheme, the local one for paths (and ``file://``)."""
    m = _SCHEME_RE.match(uri)
    return BACKENDS.get(m[1], LOCAL) if m else LOCAL


def is_gcs(uri: str) -> bool:
    """Whether ``uri`` names a Google Cloud Storage object or prefix."""
    return uri.startswith(GCS_PREFIX)


def is_s3(uri: str) -> bool:
    """Whether ``uri`` names an S3 (or S3-compatible) object or prefix."""
    return uri.startswith(S3_PREFIX)


def is_remote(uri: str) -> bool:
    """Whether ``uri`` is in an object store (``gs://`` or ``s3://``), not a local path."""
    return backend_for(uri) is not LOCAL


def join(base: str, *parts: str) -> str:
    """Join URI parts with ``/`` in object stores and the OS separator locally."""
    return backend_for(base).join(base, *parts)


def check_reachable(uri: str, what: str = "path") -> str:
    """Return ``uri`` if this storage layer can reach it (a folder, ``file://``, gs://, s3://).

    Raises:
        UnsupportedStorage: Any other scheme (``minio://``, ``abfs://``...), naming it.

    """
    m = _SCHEME_RE.match(uri)
    if m and m[1].lower() not in (*BACKENDS, "file"):
        stores = ", ".join(b.title for b in BACKENDS.values())
        hint = (
            "MinIO and SeaweedFS speak S3: give s3://BUCKET/... and their endpoint in "
            "AWS_ENDPOINT_URL"
            if m[1].lower() == "minio"
            else f"put the data and registries on {stores} or a mounted folder"
        )
        reached = " and ".join(b.prefix for b in BACKENDS.values())
        raise UnsupportedStorage(
            f"{what} {uri}: {m[1]}:// is not a storage this suite reads or writes (it reaches "
            f"local folders, {reached}); {hint}"
        )
    return uri


def normalize(uri: str) -> str:
    """Return an absolute local path, or the object store URI without a trailing slash.

    Raises:
        UnsupportedStorage: ``uri`` has a scheme other than ``gs://``, ``s3://`` or ``file://``,
            which would otherwise become a bogus local path.

    """
    backend = backend_for(uri)
    if backend is LOCAL:
        check_reachable(uri)
    return backend.normalize(uri)


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


def local_path_or_none(uri: str) -> str | None:
    """The local path for a local URI, None in an object store."""
    return None if is_remote(uri) else normalize(uri)


@contextlib.contextmanager
def environment(env: dict[str, str], unset: tuple[str, ...] = ()) -> Iterator[None]:
    """The store clients built from ``env`` meanwhile (endpoints, credentials), then as before.

    ``env`` is set over the process's environment (the variables in ``unset`` removed first),
    every store's cached clients are forgotten on entry and on exit, and the environment is
    restored on exit.
    """
    old = {k: os.environ.get(k) for k in (*env, *unset)}
    for k in unset:
        os.environ.pop(k, None)
    os.environ.update(env)
    _reset_clients()
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reset_clients()


def _reset_clients() -> None:
    for backend in BACKENDS.values():
        backend.reset()


# ------------------------------------------------------------------------- reads and writes


def exists(uri: str) -> bool:
    """Whether an object (or, locally, a file or folder) exists at ``uri``."""
    return backend_for(uri).exists(uri)


def read_bytes(uri: str) -> bytes:
    """The whole content of ``uri``.

    Raises:
        FileNotFoundError: Nothing exists at ``uri``.

    """
    return backend_for(uri).read_bytes(uri)


def read_text(uri: str) -> str:
    """The content of ``uri`` decoded as UTF-8."""
    return read_bytes(uri).decode("utf-8")


def read_with_token(uri: str) -> tuple[bytes, str] | tuple[None, None]:
    """Content and a version token for :func:`compare_and_swap`; ``(None, None)`` if absent."""
    return backend_for(uri).read_with_token(uri)


def write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri``, replacing it; readers see old or new content, never a mix."""
    backend_for(uri).write_bytes(uri, data)


def write_text(uri: str, text: str) -> None:
    """Write UTF-8 text to ``uri`` (see :func:`write_bytes`)."""
    write_bytes(uri, text.encode("utf-8"))


def create_if_absent(uri: str, data: bytes) -> bool:
    """Atomically create ``uri`` with ``data`` unless something already exists there.

    Returns:
        True if this call created the object, False if it already existed (the existing object is
        left untouched).

    """
    return backend_for(uri).create_if_absent(uri, data)


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
    return backend_for(uri).compare_and_swap(uri, data, expected_token)


def delete(uri: str, missing_ok: bool = True) -> None:
    """Delete one object (or local file)."""
    backend_for(uri).delete(uri, missing_ok)


def delete_tree(prefix: str) -> int:
    """Delete every object under ``prefix``; returns how many were deleted."""
    return backend_for(prefix).delete_tree(prefix)


def list_files(prefix: str, recursive: bool = True) -> list[FileInfo]:
    """Objects under the folder ``prefix``, sorted by URI.

    Locally, hidden files (the ``.tmp-*`` temporaries and ``.*.lock`` files) are skipped.
    """
    return backend_for(prefix).list_files(prefix, recursive)


def list_dirs(prefix: str) -> list[str]:
    """Names of the immediate sub-folders of ``prefix`` (object stores: common prefixes)."""
    return backend_for(prefix).list_dirs(prefix)


def stat(uri: str) -> FileInfo:
    """Size and generation of one object."""
    return backend_for(uri).stat(uri)


def content_id(info: FileInfo) -> str:
    """A content identity of an object: the store's checksum, or a sha256 read locally.

    Unlike the generation, it stays the same when the same bytes are written again.
    """
    return info.checksum or f"sha256:{sha256(info.uri)}"


def open_read(uri: str) -> contextlib.AbstractContextManager[IO[bytes]]:
    """A binary, streaming reader for ``uri``."""
    return backend_for(uri).open_read(uri)


def sha256(uri: str) -> str:
    """Hex SHA-256 of the object's content, streamed."""
    digest = hashlib.sha256()
    with open_read(uri) as fh:
        while chunk := fh.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def makedirs(uri: str) -> None:
    """Create a local folder (no-op in object stores, where folders are implicit)."""
    backend_for(uri).makedirs(uri)


# ------------------------------------------------------------------------ across stores


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
    if backend_for(src) is LOCAL and backend_for(dst) is LOCAL and LOCAL.link(src, dst):
        return True
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
    source, target = backend_for(src), backend_for(dst)
    if not isinstance(target, ObjectStore):  # into a local file (from a store or a local file)
        download(src, dst)
    elif source is target:
        target.copy(src, dst)
    elif isinstance(source, ObjectStore):  # across stores: through a local temporary file
        with tempfile.TemporaryDirectory(prefix="tfrs-copy-") as folder:
            path = os.path.join(folder, basename(src))
            download(src, path)
            target.upload(path, dst)
    else:
        target.upload(src, dst)


def download(uri: str, path: str, concurrency: int = 8, chunk_mb: int = 8) -> None:
    """Fetch the object ``uri`` into the local file ``path``, never leaving a partial ``path``.

    On S3 in ranged GETs of ``chunk_mb`` MiB, ``concurrency`` at once (boto3's transfer
    manager), so one object's download hides the round trips of its parts; on GCS in one GET.
    Not counted by :func:`bytes_copied` (a download is a read).
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = os.path.join(os.path.dirname(path) or ".", f"{TEMP_PREFIX}{uuid.uuid4().hex}")
    try:
        backend_for(uri).download(uri, tmp, concurrency, chunk_mb)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
