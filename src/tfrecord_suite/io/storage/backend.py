"""What every store behind the storage API shares: the interface, its answers and its errors.

:class:`Backend` is the interface each store implements (:mod:`.local`, :mod:`.gcs`, :mod:`.s3`),
with the rules that hold for every store written once here: a create-if-absent is a
compare-and-swap against "absent", and a conditional write refused after a retry is the caller's
own when the object holds its bytes. :class:`ObjectStore` adds what the object stores
(``gs://``, ``s3://``) have in common: bucket URIs joined with ``/``, uploads and server-side
copies. :class:`FileInfo` is what a listing answers, and the errors are what every store raises.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from typing import IO, Any

from tfrecord_suite.errors import UserError


class StorageError(RuntimeError):
    """A storage operation failed; the message names the URI."""


class PreconditionFailed(StorageError):
    """An atomic create or compare-and-swap lost against a concurrent writer."""


class UnsupportedStorage(StorageError, UserError):
    """A URI whose scheme this storage layer cannot reach (folders, gs:// and s3://)."""


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


def lost(uri: str) -> PreconditionFailed:
    """The error of a conditional write to ``uri`` that another writer beat."""
    return PreconditionFailed(f"{uri} changed concurrently; re-read and retry")


def timestamp(when: Any) -> float:
    """Seconds since the epoch of a store's ``datetime`` (0.0 where it gave none)."""
    return when.timestamp() if when is not None else 0.0


class Backend(abc.ABC):
    """One kind of store: the operations the storage API passes on, on URIs it is given.

    The storage API (:mod:`tfrecord_suite.io.storage`) documents each operation; a backend
    implements them for its store. The defaults here are written in terms of the others.
    """

    def reset(self) -> None:  # noqa: B027 - a store without cached clients has nothing to forget
        """Forget cached clients, so the next call builds them from the environment again."""

    @abc.abstractmethod
    def normalize(self, uri: str) -> str:
        """The canonical form of ``uri`` in this store."""

    @abc.abstractmethod
    def join(self, base: str, *parts: str) -> str:
        """``base`` and ``parts`` joined the way this store separates names."""

    def exists(self, uri: str) -> bool:
        """Whether an object exists at ``uri``."""
        try:
            self.stat(uri)
        except FileNotFoundError:
            return False
        return True

    def read_bytes(self, uri: str) -> bytes:
        """The whole content of ``uri``; FileNotFoundError when absent."""
        data, _ = self.read_with_token(uri)
        if data is None:
            raise FileNotFoundError(uri)
        return data

    @abc.abstractmethod
    def read_with_token(self, uri: str) -> tuple[bytes, str] | tuple[None, None]:
        """Content and version token, ``(None, None)`` when absent."""

    @abc.abstractmethod
    def write_bytes(self, uri: str, data: bytes) -> None:
        """Replace ``uri`` with ``data`` whole."""

    def create_if_absent(self, uri: str, data: bytes) -> bool:
        """Create ``uri`` unless it exists: a compare-and-swap against "absent"."""
        try:
            self.compare_and_swap(uri, data, None)
        except PreconditionFailed:
            return False
        return True

    @abc.abstractmethod
    def compare_and_swap(self, uri: str, data: bytes, expected_token: str | None) -> str:
        """Replace ``uri`` only if it still has ``expected_token``; the new token."""

    def ours_or_lost(self, uri: str, data: bytes, refused: Exception) -> str:
        """The token of ``uri`` if it holds ``data``, after the store refused a conditional write.

        A retried request whose first attempt did land sees its own write fail the condition:
        the object holding exactly the bytes written makes it ours (manifests and alias bodies
        are unique per attempt).

        Raises:
            PreconditionFailed: Another writer's bytes are there (or none are).

        """
        current, token = self.read_with_token(uri)
        if current == data:
            return str(token)
        raise lost(uri) from refused

    @abc.abstractmethod
    def delete(self, uri: str, missing_ok: bool) -> None:
        """Delete one object."""

    def delete_tree(self, prefix: str) -> int:
        """Delete every object under ``prefix``, one by one; how many."""
        files = self.list_files(prefix, recursive=True)
        for info in files:
            self.delete(info.uri, missing_ok=True)
        return len(files)

    @abc.abstractmethod
    def list_files(self, prefix: str, recursive: bool) -> list[FileInfo]:
        """Objects under the folder ``prefix``, sorted by URI."""

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> list[str]:
        """Names of the immediate sub-folders of ``prefix``, sorted."""

    @abc.abstractmethod
    def stat(self, uri: str) -> FileInfo:
        """What the store knows of one object; FileNotFoundError when absent."""

    @abc.abstractmethod
    def open_read(self, uri: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A binary, streaming reader."""

    @abc.abstractmethod
    def download(self, uri: str, path: str, concurrency: int, chunk_mb: int) -> None:
        """Write the object's bytes into the local file ``path`` (the caller makes it atomic)."""

    def makedirs(self, uri: str) -> None:  # noqa: B027 - object stores have no folders to make
        """Create the folder ``uri`` where folders are real (a no-op elsewhere)."""


class ObjectStore(Backend):
    """A bucket store whose URIs are ``<prefix><bucket>/<key>`` with ``/`` between names."""

    #: The URI prefix this store serves (``gs://``).
    prefix: str = ""
    #: How messages name one of its URIs (``a gs:// URI``).
    label: str = ""
    #: How messages name the store (``GCS``).
    title: str = ""

    def normalize(self, uri: str) -> str:
        """``uri`` without a trailing slash (a bucket's own URI is left as given)."""
        return uri.rstrip("/") if uri.count("/") > 2 else uri

    def join(self, base: str, *parts: str) -> str:
        """``base`` and ``parts`` joined with single slashes."""
        out = base.rstrip("/")
        for part in parts:
            out = f"{out}/{part.strip('/')}"
        return out

    def split(self, uri: str) -> tuple[str, str]:
        """``(bucket, key)`` of a URI.

        Raises:
            StorageError: The URI names no bucket.

        """
        bucket, _, key = uri[len(self.prefix) :].partition("/")
        if not bucket:
            raise StorageError(f"{uri}: {self.label} needs a bucket name")
        return bucket, key

    def folder(self, prefix: str) -> tuple[str, str]:
        """``(bucket, key)`` of the folder ``prefix``: a key ending in ``/``, "" at the top."""
        bucket, key = self.split(prefix.rstrip("/") + "/")
        return bucket, "" if key == "/" else key

    @abc.abstractmethod
    def upload(self, path: str, uri: str) -> None:
        """Store the local file ``path`` as the object ``uri``."""

    @abc.abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Copy one object to another in this store, server-side."""
