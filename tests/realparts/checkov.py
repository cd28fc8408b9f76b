"""checkov, a standard Kubernetes manifest scanner, at a pinned version in an environment of its own.

Its dependencies conflict with the suite's pins (checkov-requirements.txt says which), so it is
installed once, from that file (every package pinned), into a virtual environment in the real
parts' cache, named after the file's digest: a new pin installs anew. ``scan`` runs its
``kubernetes`` framework offline on a folder of manifests.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from realparts import parts

REQUIREMENTS = Path(__file__).with_name("checkov-requirements.txt")


def checkov_binary(build: bool = True) -> Path | None:
    """The pinned checkov's executable; installed (once, a minute or two) when ``build``, else
    None when it is missing.

    Raises:
        RuntimeError: The install failed (pip's last lines say why).

    """
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    venv = parts.cache_root() / f"checkov-{digest}"
    binary = venv / "bin" / "checkov"
    if (venv / ".complete").exists():
        return binary
    if not build:
        return None
    # the interpreter the suite's virtual environment was made from
    subprocess.run([sys._base_executable, "-m", "venv", "--clear", str(venv)], check=True)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
         "-r", str(REQUIREMENTS)],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"installing checkov failed:\n{proc.stderr[-3000:]}")
    (venv / ".complete").touch()
    return binary


def scan(folder: Path, binary: Path) -> list[dict[str, Any]]:
    """Every failed check of checkov's ``kubernetes`` framework on the manifests in ``folder``:
    ``check_id``, ``check_name``, ``resource`` (``Kind.namespace.name``) and ``file_path``.
    Offline: nothing is fetched from its vendor's service (``--skip-download``)."""
    proc = subprocess.run(
        [str(binary), "--directory", str(folder), "--framework", "kubernetes", "--output", "json",
         "--quiet", "--compact", "--skip-download"],
        capture_output=True, text=True, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    # exit 1: checks failed (the output says which); anything else is checkov's own failure
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"checkov exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = []
    for report in reports:
        if isinstance(report, dict) and "results" in report:
            failed += report["results"]["failed_checks"]
    return failed
