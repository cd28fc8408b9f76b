"""Private local folders a process holds while it lives, and the sweep of those it left behind.

The shard step's disk shuffle holds a copy of the whole dataset under ``TMPDIR``, and training's
stager the shards in flight. A process that is killed (SIGKILL, the OOM killer, a reboot with a
persistent temporary folder) cannot remove its folder, so each holds a lock on its own for its
life (``flock``: the kernel drops it when the process dies, whatever kills it), and the next
process to make one with the same prefix in the same place removes every folder whose lock no
process holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile

_LOG = logging.getLogger(__name__)
#: The lock file inside each held folder (the rest of the folder is its user's).
LOCK_FILE = ".owner.lock"
#: The end of a held folder's dot-name while its holder removes it.
_REMOVING = "-removing"


class HeldFolder:
    """A folder this process holds until :meth:`remove` (or its end).

    The folder is made under a name no sweep matches (a dot before ``prefix``), its lock file is
    created and locked, and only then is it renamed to ``prefix`` and a random suffix: so every
    folder of that name whose lock can be taken, or that has no lock file (made before locks were
    kept), belongs to no live process.

    Attributes:
        path: The folder.

    """

    def __init__(self, path: str, lock: int):
        self.path = path
        self._lock = lock

    @classmethod
    def create(cls, prefix: str, parent: str | None = None) -> HeldFolder:
        """Remove the abandoned ``prefix`` folders in ``parent``, then make and hold a new one.

        Args:
            prefix: The folders' name prefix, e.g. ``tfrs-shuffle-`` (no ``-`` after it).
            parent: Where (default: the system's temporary folder, ``TMPDIR``).

        """
        parent = parent or tempfile.gettempdir()
        sweep(parent, prefix)
        making = tempfile.mkdtemp(prefix=f".{prefix}new-", dir=parent)
        lock = os.open(os.path.join(making, LOCK_FILE), os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        # mkdtemp's suffix has no "-": the last one is the one before it
        path = os.path.join(parent, prefix + os.path.basename(making).rsplit("-", 1)[1])
        os.rename(making, path)
        return cls(path, lock)

    def remove(self) -> None:
        """Delete the folder, then let go of its lock (twice is harmless).

        The folder first leaves its name for a dot-name that sweeps match only while its lock
        can be taken (deleting it where it is would, for a moment, leave a folder of that name
        without its lock file: a sweep running then would take it for one made before locks were
        kept), and its lock file goes last: so a process killed while it removes its folder
        leaves a folder the next sweep removes.
        """
        if self._lock < 0:
            return
        if os.path.isdir(self.path):
            parent, name = os.path.split(self.path)
            going = os.path.join(parent, f".{name}{_REMOVING}")
            os.rename(self.path, going)
            with os.scandir(going) as entries:
                for entry in entries:
                    if entry.name == LOCK_FILE:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.remove(entry.path)
            shutil.rmtree(going, ignore_errors=True)
        os.close(self._lock)
        self._lock = -1


def sweep(parent: str, prefix: str) -> list[str]:
    """Remove the ``prefix`` folders in ``parent`` that no live process holds; their paths.

    That includes those whose holder was killed while it removed them. A folder another user
    owns, or whose lock file cannot be opened, is left alone.
    """
    removed = []
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        being_removed = name.startswith(f".{prefix}") and name.endswith(_REMOVING)
        if not (name.startswith(prefix) or being_removed) or not os.path.isdir(path):
            continue
        try:
            lock = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR)
        except FileNotFoundError:
            if being_removed:  # its holder's last step (its lock file goes last), or gone there
                continue
            lock = -1
        except OSError:
            continue
        try:
            if lock >= 0:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # a live process holds it
                    continue
            if not os.path.isdir(path):  # its holder removed it (then let go) meanwhile
                continue
            size = _size(path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            _LOG.warning(
                "removed %s (%.1f MB), left by a process that ended without removing it (killed?)",
                path,
                size / 1e6,
            )
        finally:
            if lock >= 0:
                with contextlib.suppress(OSError):
                    os.close(lock)
    return removed


def _size(path: str) -> int:
    """Bytes of the files under ``path`` (what another sweep removes meanwhile counts 0)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, name))
    return total
