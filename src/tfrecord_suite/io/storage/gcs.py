"""Google Cloud Storage (``gs://``) behind the storage API, through google-cloud-storage.

Conditional writes use the object's generation: ``if_generation_match=0`` creates only what does
not exist, a generation read before replaces only that generation. Every request retries 429s,
5xx and dropped connections (:func:`retry_policy`). With ``STORAGE_EMULATOR_HOST`` set, the
client is anonymous and talks to that emulator.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO, Any

from tfrecord_suite.io.storage.backend import FileInfo, ObjectStore, StorageError, timestamp

PREFIX = "gs://"

_CLIENT: Any = None


def client() -> Any:
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


def reset_client() -> None:
    """Forget the cached client (tests point it at a new emulator)."""
    global _CLIENT
    _CLIENT = None


def retry_policy() -> Any:
    """GCS's retry policy (429, 5xx, dropped connections) with a faster first backoff."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_delay(initial=0.25, maximum=16.0, multiplier=2.0)


def _errors() -> tuple[type[Exception], type[Exception]]:
    from google.api_core import exceptions

    return exceptions.NotFound, exceptions.PreconditionFailed


def _checksum(blob: Any) -> str:
    if blob.md5_hash:
        return f"md5:{blob.md5_hash}"
    return f"crc32c:{blob.crc32c}" if blob.crc32c else ""


def _info(uri: str, blob: Any) -> FileInfo:
    return FileInfo(
        uri, int(blob.size or 0), str(blob.generation), timestamp(blob.updated), _checksum(blob)
    )


class GCS(ObjectStore):
    """Objects in Google Cloud Storage buckets."""

    prefix = PREFIX
    label = "a gs:// URI"
    title = "GCS"

    def reset(self) -> None:
        """Forget the cached client."""
        reset_client()

    def _blob(self, uri: str) -> Any:
        bucket, name = self.split(uri)
        return client().bucket(bucket).blob(name)

    def exists(self, uri: str) -> bool:
        """Whether the object exists."""
        return bool(self._blob(uri).exists(retry=retry_policy()))

    def read_with_token(self, uri: str) -> tuple[bytes, str] | tuple[None, None]:
        """The content and its generation."""
        not_found, _ = _errors()
        blob = self._blob(uri)
        try:
            data = blob.download_as_bytes(retry=retry_policy())
        except not_found:
            return None, None
        return data, str(blob.generation)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Upload ``data`` as the object."""
        self._blob(uri).upload_from_string(data, retry=retry_policy())

    def compare_and_swap(self, uri: str, data: bytes, expected_token: str | None) -> str:
        """Upload on the precondition that the generation is still ``expected_token`` (0: none)."""
        _, precondition = _errors()
        blob = self._blob(uri)
        match = 0 if expected_token is None else int(expected_token)
        try:
            blob.upload_from_string(data, if_generation_match=match, retry=retry_policy())
        except precondition as exc:
            return self.ours_or_lost(uri, data, exc)
        return str(blob.generation)

    def delete(self, uri: str, missing_ok: bool) -> None:
        """Delete the object (NotFound when missing and not ``missing_ok``)."""
        not_found, _ = _errors()
        try:
            self._blob(uri).delete(retry=retry_policy())
        except not_found:
            if not missing_ok:
                raise

    def list_files(self, prefix: str, recursive: bool) -> list[FileInfo]:
        """The objects under ``prefix`` (one level of it unless ``recursive``)."""
        bucket, name = self.folder(prefix)
        blobs = client().list_blobs(
            bucket, prefix=name, delimiter=None if recursive else "/", retry=retry_policy()
        )
        out = [_info(f"gs://{bucket}/{b.name}", b) for b in blobs if not b.name.endswith("/")]
        return sorted(out, key=lambda f: f.uri)

    def list_dirs(self, prefix: str) -> list[str]:
        """The common prefixes one level under ``prefix``."""
        bucket, name = self.folder(prefix)
        it = client().list_blobs(bucket, prefix=name, delimiter="/", retry=retry_policy())
        for _ in it:  # prefixes are only populated once the pages are consumed
            pass
        return sorted(p[len(name) :].rstrip("/") for p in it.prefixes)

    def stat(self, uri: str) -> FileInfo:
        """The object's metadata."""
        bucket, name = self.split(uri)
        blob = client().bucket(bucket).get_blob(name, retry=retry_policy())
        if blob is None:
            raise FileNotFoundError(uri)
        return _info(uri, blob)

    def open_read(self, uri: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A streaming reader of the object."""
        return self._blob(uri).open("rb", retry=retry_policy())

    def download(self, uri: str, path: str, concurrency: int, chunk_mb: int) -> None:
        """Fetch the object in one GET."""
        self._blob(uri).download_to_filename(path, retry=retry_policy())

    def upload(self, path: str, uri: str) -> None:
        """Upload the local file."""
        self._blob(uri).upload_from_filename(path, retry=retry_policy())

    def copy(self, src: str, dst: str) -> None:
        """Rewrite ``src`` into ``dst`` server-side, as many calls as the service asks."""
        src_blob, dst_blob = self._blob(src), self._blob(dst)
        token, _, _ = dst_blob.rewrite(src_blob, retry=retry_policy())
        while token is not None:
            token, _, _ = dst_blob.rewrite(src_blob, token=token, retry=retry_policy())
