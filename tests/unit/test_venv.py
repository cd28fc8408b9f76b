"""What `make venv` builds: the environment every test, step and subprocess here runs in."""

from __future__ import annotations

import importlib.util
import os
import sys


def test_the_venv_holds_its_packages_bytecode():
    """`make venv` compiles every package's bytecode at install (uv's --compile-bytecode; pip
    did it unasked). Without it, where PYTHONDONTWRITEBYTECODE is set (CI's shell sets it), no
    process writes a .pyc and each one compiled TensorFlow's modules again: 18 CPU-s per import
    against 9, and a fresh clone's make test took 34 minutes instead of 24."""
    spec = importlib.util.find_spec("mkdocs.commands")
    assert spec is not None and spec.origin is not None
    # gh_deploy: a module no test imports, so only the install can have compiled it
    cached = os.path.join(
        os.path.dirname(spec.origin), "__pycache__", f"gh_deploy.{sys.implementation.cache_tag}.pyc"
    )
    assert os.path.isfile(cached), f"{cached}: the venv was installed without bytecode"
