"""make test's workers: the groups of tests that keep to one worker name real markers, and
the Makefile runs pytest-xdist with the scheduling that honours them."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from support import COMPONENTS_GROUP, XDIST_GROUPS

ROOT = Path(__file__).resolve().parents[2]


def test_every_group_names_a_registered_marker():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(XDIST_GROUPS) <= markers
    assert (ROOT / COMPONENTS_GROUP).is_dir()


def test_make_test_runs_three_workers_that_keep_the_groups():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PYTEST_WORKERS \?= 3$", makefile, re.M)
    assert "pytest -n $(PYTEST_WORKERS) --dist loadgroup" in makefile


def test_the_groups_keep_to_one_worker_under_the_pinned_pytest_and_xdist(tmp_path):
    """The suite's own grouping hook, under real pytest-xdist workers: each group's tests run on
    one worker (their ids carry the group). pytest 9.2 broke this silently (pytest-xdist issue
    1386): podman's tests then ran on both workers at once and their builds collided."""
    tests = Path(__file__).resolve().parents[1]
    (tmp_path / "conftest.py").write_text(
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(tests)!r})\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(tests / 'conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(suite)\n"
        "pytest_collection_modifyitems = suite.pytest_collection_modifyitems  # the suite's hook\n"
    )
    marks = {"containers": 4, "k8s": 4, "": 4}
    body = ["import os, time", "import pytest", ""]
    for mark, count in marks.items():
        for i in range(count):
            body += [f"@pytest.mark.{mark}" if mark else "", f"def test_{mark or 'free'}_{i}():",
                     "    time.sleep(0.2)",
                     f"    open('{tmp_path}/{mark or 'free'}_{i}', 'w').write("
                     "os.environ['PYTEST_XDIST_WORKER'])", ""]  # fmt: skip
    (tmp_path / "test_grouped.py").write_text("\n".join(body))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    for mark, group in (("containers", "podman"), ("k8s", "k8s")):
        workers = {(tmp_path / f"{mark}_{i}").read_text() for i in range(marks[mark])}
        assert len(workers) == 1, (mark, workers)
        assert f"test_{mark}_0@{group}" in proc.stdout


def test_each_cluster_group_names_cluster_tests_that_exist_and_make_runs_them_on_two_workers():
    """A renamed test or file would fall silently into the other cluster group (and onto the
    worker whose share of the time the groups were balanced against)."""
    import ast

    from support import CLUSTER_GROUPS, CLUSTER_NODE_GROUP

    integration = ROOT / "tests" / "integration"
    for key in CLUSTER_GROUPS:
        name, _, test = key.partition("::")
        source = (integration / name).read_text()
        assert "pytest.mark.cluster" in source, key
        if test:
            defined = {
                n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)
            }
            assert test in defined, key
    assert len({*CLUSTER_GROUPS.values(), CLUSTER_NODE_GROUP}) == 2
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pytest -m cluster -n 2 --dist loadgroup", makefile)


def test_the_kfp_runs_that_launch_trainjobs_share_a_group_with_the_runtime_s_patch():
    """test_cluster_training.py gives the one ClusterTrainingRuntime a claim its namespaces
    have and the profile's does not: a run launching TrainJobs in the profile meanwhile would
    wait forever on nodes that cannot be scheduled (seen on two workers with them apart)."""
    import ast

    from support import cluster_group_of

    training = {cluster_group_of("test_cluster_training.py", "any")}
    source = (ROOT / "tests" / "integration" / "test_kfp.py").read_text()
    launching = [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        and re.search(r'"workers": *2', ast.get_source_segment(source, node) or "")
    ]  # fmt: skip
    assert launching, "no run in test_kfp.py launches a TrainJob of two nodes any more"
    assert {cluster_group_of("test_kfp.py", name) for name in launching} == training
