"""Where a test run's CPU goes: ``pytest --cpu-report=FILE`` appends a JSON line per test.

Each line holds the test's wall time and the CPU-seconds (user and system) of the process that
ran it and of the child processes it waited for meanwhile (a server started by a session fixture
is counted where its process is reaped, usually at the end). ``make test`` is bound by the
machine's cores (docs/how-to/one-node-cluster.md, "In CI"), so what makes it shorter is CPU work
gone; ``python tests/cpu_report.py FILE`` sums the lines per test file, the heaviest first.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuReport:
    """The plugin ``tests/conftest.py`` registers when ``--cpu-report`` is given."""

    def __init__(self, path: str):
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        start, (own, children) = time.monotonic(), _cpu()
        yield
        own_after, children_after = _cpu()
        line = {
            "test": item.nodeid,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
            "wall_s": round(time.monotonic() - start, 3),
            "cpu_s": round(own_after - own, 3),
            "children_cpu_s": round(children_after - children, 3),
        }
        with open(self.path, "a") as fh:  # one short append per line: workers share the file
            fh.write(json.dumps(line) + "\n")


def by_file(path: str) -> list[tuple[str, float, float]]:
    """(test file, CPU-seconds, wall seconds) of a report, the most CPU first."""
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    with open(path) as fh:
        for line in fh:
            row = json.loads(line)
            name = row["test"].split("::")[0]
            cpu[name] += row["cpu_s"] + row["children_cpu_s"]
            wall[name] += row["wall_s"]
    return sorted(((n, cpu[n], wall[n]) for n in cpu), key=lambda r: -r[1])


if __name__ == "__main__":
    rows = by_file(sys.argv[1])
    print(f"{sum(r[1] for r in rows):.0f} CPU-s in all; per test file (CPU-s, wall s):")
    for name, cpu_s, wall_s in rows:
        print(f"{cpu_s:8.0f} {wall_s:8.0f}  {name}")
