"""make test's two workers: the groups of tests that keep to one worker name real markers, and
the Makefile runs pytest-xdist with the scheduling that honours them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from support import COMPONENTS_GROUP, XDIST_GROUPS

ROOT = Path(__file__).resolve().parents[2]


def test_every_group_names_a_registered_marker():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(XDIST_GROUPS) <= markers
    assert (ROOT / COMPONENTS_GROUP).is_dir()


def test_make_test_runs_two_workers_that_keep_the_groups():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PYTEST_WORKERS \?= 2$", makefile, re.M)
    assert "pytest -n $(PYTEST_WORKERS) --dist loadgroup" in makefile
