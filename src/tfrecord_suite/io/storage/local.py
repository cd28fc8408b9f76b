"""Local folders (and mounted volumes) behind the storage API.

Atomic by the filesystem's own means: a write goes to a hidden temporary file that is renamed over
the target, so readers never see a partial file; :meth:`Local.create_if_absent` hard-links the
fully written temporary file into place (``link`` fails if the target exists);
:meth:`Local.compare_and_swap` compares a content digest under an exclusive lock on a hidden
``.<name>.lock`` beside the file. Listings skip those hidden ``.tmp-*`` and ``.*.lock`` files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO

from tfrecord_suite.io.storage.backend import Backend, FileInfo, lost

#: Name prefix of a write's (or a download's) temporary file beside its target, hidden from
#: listings until it is renamed into place.
TEMP_PREFIX = ".tmp-"


class Local(Backend):
    """Paths on this machine's filesystems."""

    def normalize(self, uri: str) -> str:
        """An absolute path; a ``file://`` URI's path."""
        if uri.startswith("file://"):
            uri = uri[len("file://") :]
        return os.path.abspath(os.path.expanduser(uri))

    def join(self, base: str, *parts: str) -> str:
        """``os.path.join``."""
        return os.path.join(base, *parts)

    def exists(self, uri: str) -> bool:
        """Whether a file or folder exists at ``uri``."""
        return os.path.exists(uri)

    def read_bytes(self, uri: str) -> bytes:
        """The file's content."""
        with open(uri, "rb") as fh:
            return fh.read()

    def read_with_token(self, uri: str) -> tuple[bytes, str] | tuple[None, None]:
        """The file's content and its SHA-256 as the token."""
        try:
            with open(uri, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None, None
        return data, hashlib.sha256(data).hexdigest()

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a temporary file and rename it over ``uri``."""
        _atomic_write(uri, data, replace=True)

    def create_if_absent(self, uri: str, data: bytes) -> bool:
        """Hard-link a fully written temporary file to ``uri``; False if ``uri`` exists."""
        try:
            _atomic_write(uri, data, replace=False)
        except FileExistsError:
            return False
        return True

    def compare_and_swap(self, uri: str, data: bytes, expected_token: str | None) -> str:
        """Compare the content's digest and replace the file, under an exclusive lock."""
        os.makedirs(os.path.dirname(uri) or ".", exist_ok=True)
        with _lock(uri):
            _, current = self.read_with_token(uri)
            if current != expected_token:
                raise lost(uri)
            _atomic_write(uri, data, replace=True)
        return hashlib.sha256(data).hexdigest()

    def delete(self, uri: str, missing_ok: bool) -> None:
        """Remove one file."""
        try:
            os.remove(uri)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_tree(self, prefix: str) -> int:
        """Remove the files under ``prefix``, then the folder itself."""
        removed = super().delete_tree(prefix)
        if os.path.isdir(prefix):
            shutil.rmtree(prefix, ignore_errors=True)
        return removed

    def list_files(self, prefix: str, recursive: bool) -> list[FileInfo]:
        """The files under ``prefix``, hidden ones skipped."""
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

    def list_dirs(self, prefix: str) -> list[str]:
        """The sub-folders of ``prefix``, hidden ones skipped."""
        if not os.path.isdir(prefix):
            return []
        return sorted(
            e.name for e in os.scandir(prefix) if e.is_dir() and not e.name.startswith(".")
        )

    def stat(self, uri: str) -> FileInfo:
        """Size and modification time (nanoseconds as the generation)."""
        st = os.stat(uri)
        return FileInfo(uri, st.st_size, str(st.st_mtime_ns), st.st_mtime)

    def open_read(self, uri: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """The open file."""
        return open(uri, "rb")

    def download(self, uri: str, path: str, concurrency: int, chunk_mb: int) -> None:
        """Copy the file's bytes."""
        shutil.copyfile(uri, path)

    def makedirs(self, uri: str) -> None:
        """Create the folder and its parents."""
        os.makedirs(uri, exist_ok=True)

    def link(self, src: str, dst: str) -> bool:
        """Give the file ``src`` the second name ``dst`` (a hard link: one inode, no new bytes).

        Returns:
            True when linked (or ``dst`` already is ``src``), False where this filesystem cannot
            link them (across filesystems, no links, too many links).

        """
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
        return False


def _atomic_write(path: str, data: bytes, replace: bool) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=os.path.dirname(path) or ".")
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
def _lock(path: str) -> Iterator[None]:
    lock_path = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.lock")
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
