"""Starting a real part's process, finding it a port and waiting for it: the one copy of each.

The control plane, the one-node cluster, SeaweedFS, Beam's job servers and the local operator all
start processes with a log file of their own and wait until they answer; these are the helpers
they share.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

# the port-picking rule is the product's (its local tf.data service picks ports the same way)
from tfrecord_suite.ports import free_port as free_port
from tfrecord_suite.ports import free_ports as free_ports

T = TypeVar("T")


class WaitError(RuntimeError):
    """What was waited for did not happen in time, or its process ended first."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies, so a test run
    killed outright (no fixture teardown) leaves no server behind (Linux prctl). Not SIGTERM:
    the API server's graceful shutdown waits on etcd, which is going too."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def spawn(
    argv: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    die_with_parent: bool = True,
) -> subprocess.Popen:
    """Start ``argv`` in a session of its own, its output appended to ``log``.

    With ``die_with_parent`` (a test's server) it is killed when the process that started it
    ends; without (``make cluster-up``'s cluster) it outlives it.
    """
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ('' where there is none)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


#: What ``wait_for`` raises at once instead of counting as "not yet": a failed assertion (the
#: test's verdict, not a state still to come) and the errors of code that cannot run (a wrong
#: name, attribute, type or import). Retrying them only turns a bug into a timeout.
NOT_RETRIED: tuple[type[BaseException], ...] = (
    AssertionError,
    AttributeError,
    ImportError,
    NameError,
    SyntaxError,
    TypeError,
)


def wait_for(
    ready: Callable[[], T],
    timeout: float = 60.0,
    what: str = "",
    alive: Callable[[], bool] | None = None,
    log: Callable[[], str] | None = None,
    interval: float = 0.5,
) -> T:
    """Poll ``ready()`` until it returns something true, and return that.

    Any other exception from ``ready()`` (a refused connection, an API error, a missing object)
    counts as not yet and is named in the failure; one of :data:`NOT_RETRIED` is raised at
    once. ``alive()`` returning False ends the wait at once (the process it waits on has
    exited). ``log()`` is added to the failure's message.

    Raises:
        WaitError: Not ready within ``timeout`` seconds, or no longer alive.
        AssertionError: ``ready()`` asserted and failed (or another of :data:`NOT_RETRIED`).

    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        if alive is not None and not alive():
            raise WaitError(f"{what}: the process exited\n{log() if log else ''}".rstrip())
        try:
            value = ready()
            if value:
                return value
        except NOT_RETRIED:
            raise
        except Exception as exc:  # not yet: named in the failure below
            last = exc
        if time.monotonic() > deadline:
            detail = f" ({type(last).__name__}: {last})" if last is not None else ""
            raise WaitError(
                f"{what}: not ready after {timeout:.0f} s{detail}\n{log() if log else ''}".rstrip()
            )
        time.sleep(interval)
