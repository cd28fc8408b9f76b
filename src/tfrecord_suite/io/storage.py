"""One storage API for local folders and ``gs://`` URIs.

Everything the suite persists (shards, manifests, aliases, metrics) goes through this module, so a
local folder can stand in for a bucket in tests and demos and nothing else changes in production.

Two primitives carry the correctness guarantees of the registry:

* :func:`create_if_absent` writes an object only if no object exists at that name, atomically: on
  GCS with the ``if_generation_match=0`` precondition, locally by hard-linking a fully written
  temporary file into place (``link`` fails if the target exists, and readers never see a partial
  file).
* :func:`compare_and_swap` replaces an object only if it still holds the version the caller read
  (GCS generation, or a content digest locally under an exclusive lock), so concurrent alias
  updates never lose a write.
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
import uuid
from collections.abc import Iterator
from typing import IO, Any

from tfrecord_suite.errors import UserError

GCS_PREFIX = "gs://"
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
        uri: Full URI (local absolute path or ``gs://bucket/name``).
        size: Size in bytes.
        generation: GCS generation, or the modification time in nanoseconds locally: it changes
            on every write, even of the same bytes.
        mtime: Modification time (seconds).
        checksum: What the store knows of the content without reading it: GCS's MD5
            (``md5:<base64>``) or, for composite objects that have none, its CRC32C
            (``crc32c:<base64>``); empty locally.

    """

    uri: str
    size: int
    generation: str
    mtime: float = 0.0
    checksum: str = ""


def is_gcs(uri: str) -> bool:
    """Whether ``uri`` names a Google Cloud Storage object or prefix."""
    return uri.startswith(GCS_PREFIX)


def join(base: str, *parts: str) -> str:
    """Join URI parts with ``/`` for GCS and the OS separator locally."""
    if is_gcs(base):
        out = base.rstrip("/")
        for part in parts:
            out = f"{out}/{part.strip('/')}"
        return out
    return os.path.join(base, *parts)


class UnsupportedStorage(StorageError, UserError):
    """A URI whose scheme this storage layer cannot reach (it reaches folders and gs://)."""


_SCHEME_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def check_reachable(uri: str, what: str = "path") -> str:
    """Return ``uri`` if this storage layer can reach it (a folder, ``file://`` or ``gs://``).

    Raises:
        UnsupportedStorage: Any other scheme (``s3://``, ``minio://``...), naming it.

    """
    m = _SCHEME_RE.match(uri)
    if m and m[1].lower() not in ("gs", "file"):
        raise UnsupportedStorage(
            f"{what} {uri}: {m[1]}:// is not a storage this suite reads or writes (it reaches "
            "local folders and gs://); put the data and registries on GCS or a mounted folder"
        )
    return uri


def normalize(uri: str) -> str:
    """Return an absolute local path, or the GCS URI without a trailing slash.

    Raises:
        UnsupportedStorage: ``uri`` has a scheme other than ``gs://`` or ``file://``, which
            would otherwise become a bogus local path.

    """
    if is_gcs(uri):
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


# ------------------------------------------------------------------------------------- public API


def exists(uri: str) -> bool:
    """Whether an object (or, locally, a file or folder) exists at ``uri``."""
    if is_gcs(uri):
        return bool(_blob(uri).exists(retry=_retry()))
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
    try:
        os.remove(uri)
    except FileNotFoundError:
        if not missing_ok:
            raise


def delete_tree(prefix: str) -> int:
    """Delete every object under ``prefix``; returns how many were deleted."""
    files = list_files(prefix)
    for info in files:
        delete(info.uri)
    if not is_gcs(prefix) and os.path.isdir(prefix):
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
    if not os.path.isdir(prefix):
        return []
    return sorted(e.name for e in os.scandir(prefix) if e.is_dir() and not e.name.startswith("."))


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
    Anywhere else (GCS, across filesystems, a filesystem without links) the object is copied.

    Returns:
        True when linked, False when copied.

    """
    if not is_gcs(src) and not is_gcs(dst):
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
    """Copy one object; server-side when both ends are on GCS, never through a partial ``dst``.

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
    if not is_gcs(src) and not is_gcs(dst):
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        tmp = _tmp_name(dst)
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        return
    if is_gcs(dst):
        _blob(dst).upload_from_filename(src, retry=_retry())
    else:
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        tmp = _tmp_name(dst)
        _blob(src).download_to_filename(tmp, retry=_retry())
        os.replace(tmp, dst)


@contextlib.contextmanager
def open_read(uri: str) -> Iterator[IO[bytes]]:
    """A binary, streaming reader for ``uri``."""
    if is_gcs(uri):
        with _blob(uri).open("rb", retry=_retry()) as fh:
            yield fh
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
    """Create a local folder (no-op on GCS, where folders are implicit)."""
    if not is_gcs(uri):
        os.makedirs(uri, exist_ok=True)


def local_path_or_none(uri: str) -> str | None:
    """The local path for a local URI, None for GCS."""
    return None if is_gcs(uri) else normalize(uri)


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
