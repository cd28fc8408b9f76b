"""TensorFlow's import without the lines its native runtime prints whatever the log level.

TensorFlow 2.21 writes, on every import and before its logging is set up, "All log messages
before absl::InitializeLog() is called are written to STDERR" and "oneDNN custom operations are
on. You may see slightly different numerical results..." (once per shared library it loads) to
file descriptor 2, so ``TF_CPP_MIN_LOG_LEVEL`` cannot hold them back; only
``TF_ENABLE_ONEDNN_OPTS=0`` would, which changes the numerics and the speed. :func:`install`
makes the process's first ``import tensorflow`` write its stderr to a temporary file and copy
back every line but those (:data:`NOISE`), and makes the process remove at exit the bytecode of
the modules TensorFlow's AutoGraph wrote (:func:`remove_autograph_bytecode`). The entry points a
user runs install it (the CLI, the components' tasks); importing the package does not.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType
from typing import Any

#: The lines TensorFlow's import prints at any log level, and nothing else.
NOISE = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|I\d{4} [\d:.]+ +\d+ port\.cc:\d+\] oneDNN custom operations are on\. .*"
)
#: The name AutoGraph gives each module it writes to the temporary folder, before a random part.
AUTOGRAPH_MODULE_PREFIX = "__autograph_generated_file"


@contextlib.contextmanager
def native_stderr_without(noise: re.Pattern[bytes]) -> Iterator[None]:
    """File descriptor 2 into a temporary file meanwhile; then its lines but ``noise``'s back.

    What native code and Python write to stderr meanwhile appears when the block ends, in
    order. Where descriptor 2 is closed (Python's ``sys.stderr`` is then None), the block runs
    as it is.
    """
    if sys.stderr is None:
        yield
        return
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            if sys.stderr is not None:
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held if not noise.fullmatch(line.rstrip(b"\r\n"))]
            with os.fdopen(os.dup(2), "wb") as err:
                err.writelines(kept)


class _QuietLoader(importlib.abc.Loader):
    """The real loader of ``tensorflow``, run with its native noise dropped."""

    def __init__(self, loader: Any, finder: _QuietTensorFlow):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # the module keeps the real loader (resources, reloads): this one only wraps the import
        module.__loader__ = module.__spec__.loader = self._loader  # type: ignore[union-attr]
        try:
            with native_stderr_without(NOISE):
                self._loader.exec_module(module)
        finally:
            self._finder.remove()


class _QuietTensorFlow(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as the other finders do; wraps its loader in :class:`_QuietLoader`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietLoader(spec.loader, self)
                return spec
        return None

    def remove(self) -> None:
        """Out of ``sys.meta_path``: only the first import is wrapped."""
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def remove_autograph_bytecode() -> None:
    """Delete the bytecode of every AutoGraph module this process imported.

    AutoGraph writes each function it converts as a module in the temporary folder and deletes
    that ``.py`` at exit, but importing it wrote its ``.pyc`` into ``__pycache__`` there (unless
    ``PYTHONDONTWRITEBYTECODE``): every training run left files in ``TMPDIR`` for good. A
    ``__pycache__`` that this leaves empty goes too (another process's files stay).
    """
    folders = set()
    for name, module in list(sys.modules.items()):
        source = getattr(module, "__file__", None)
        if not name.startswith(AUTOGRAPH_MODULE_PREFIX) or not source:
            continue
        cached = importlib.util.cache_from_source(source)
        with contextlib.suppress(OSError):
            os.remove(cached)
            folders.add(os.path.dirname(cached))
    for folder in folders:
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only when empty


def install() -> None:
    """Wrap the process's first ``import tensorflow``, and remove AutoGraph's bytecode at exit.

    Nothing if TensorFlow was imported already.
    """
    if "tensorflow" in sys.modules or any(isinstance(f, _QuietTensorFlow) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlow())
    atexit.register(remove_autograph_bytecode)
