"""The ml-metadata environment (``build.sh mlmd``): a Python holding ML Metadata's store and
messages, which pins ``protobuf<5`` and so cannot be the suite's. The MLMD server's tests run
it, and the cluster tests read a Kubeflow Pipelines run's lineage through it, as the UI does
(tests/cluster/mlmd/run_lineage.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from realparts import parts

ENV = "TFRS_MLMD_PYTHON"
LINEAGE = Path(__file__).resolve().parent.parent / "cluster" / "mlmd" / "run_lineage.py"


def python(build: bool = True) -> str | None:
    """``$TFRS_MLMD_PYTHON``, or the built environment's Python (built first when ``build``),
    or None where there is neither."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    folder = parts.built("mlmd") or (parts.build("mlmd") if build else None)
    return str(folder / "bin" / "python") if folder else None


def run_lineage(ui_url: str, run_id: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A run's executions and their output artifacts, read from ML Metadata through the KFP
    UI's gRPC-web endpoint at ``ui_url`` (run_lineage.py)."""
    argv = [str(python()), str(LINEAGE), ui_url, run_id]
    for name, value in (headers or {}).items():
        argv += ["--header", f"{name}:{value}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"reading run {run_id}'s lineage failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)
