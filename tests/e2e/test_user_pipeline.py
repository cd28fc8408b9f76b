"""A kfp user's own pipeline (tests/e2e/user_pipeline.py) composed only of components loaded from
components/*/*/component.yaml, plus a component of theirs that reads our Dataset and Model
artifacts: it imports no module of the suite, compiles, and runs with kfp.local on the host
(SubprocessRunner). The same file runs inside the built image in tests/e2e/test_images_real.py
(DockerRunner)."""

import json
import os
import subprocess
import sys

import pytest
from support import write_csv

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_users_pipeline_imports_only_kfp_and_compiles(tmp_path):
    code = (
        f"import sys; sys.path.insert(0, {HERE!r}); import user_pipeline\n"
        "from kfp import compiler\n"
        f"compiler.Compiler().compile(user_pipeline.user_pipeline, {str(tmp_path / 'p.yaml')!r})\n"
        "print([m for m in sys.modules if m.startswith('tfrecord_suite')])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "p.yaml").exists()


def blobs(root) -> str:
    """A small table with three well-separated classes."""
    return write_csv(
        str(root / "raw" / "blobs.csv"),
        ["x", "y", "kind"],
        [[i % 7 + (i % 3) * 10, (i * 5) % 11, "abc"[i % 3]] for i in range(300)],
    )


def check_run(summary: dict, registry: str) -> None:
    assert summary["ref"] == f"{registry}/blobs@1.0.0"
    assert summary["records"] == 300 and sum(summary["splits"].values()) == 300
    assert "saved_model.pb" in summary["export_files"]
    assert summary["ref"].endswith("/" + summary["trained_on"])  # the model names its version


@pytest.mark.e2e
def test_the_users_pipeline_runs_on_the_host(tmp_path, monkeypatch):
    from kfp import local

    sys.path.insert(0, HERE)
    try:
        import user_pipeline
    finally:
        sys.path.remove(HERE)
    (tmp_path / "raw").mkdir()
    raw = blobs(tmp_path)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=True,
    )
    task = user_pipeline.user_pipeline(input_uri=raw, registry_root=str(tmp_path / "registry"))
    check_run(json.loads(task.output), str(tmp_path / "registry"))
