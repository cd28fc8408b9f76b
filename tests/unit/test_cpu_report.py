"""pytest --cpu-report (tests/cpu_report.py): what it writes and how it sums."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cpu_report import by_file

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_report_sums_each_files_cpu_and_its_reaped_childrens(tmp_path):
    report = tmp_path / "cpu.jsonl"
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {TESTS!r})\nfrom cpu_report import CpuReport\n"
        f"def pytest_configure(config):\n"
        f"    config.pluginmanager.register(CpuReport({str(report)!r}))\n"
    )
    test = tmp_path / "test_spends.py"
    test.write_text(
        "import subprocess, sys\n"
        "def test_child():\n"
        "    subprocess.run([sys.executable, '-c', 'sum(range(3 * 10**7))'], check=True)\n"
        "def test_idle():\n"
        "    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test),
         f"--rootdir={tmp_path}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    child, idle = sorted(lines, key=lambda r: r["test"])
    assert child["children_cpu_s"] > 0.2 > idle["children_cpu_s"] + idle["cpu_s"]
    ((name, cpu_s, wall_s),) = by_file(str(report))
    assert name.endswith("test_spends.py")
    assert cpu_s == sum(r["cpu_s"] + r["children_cpu_s"] for r in lines) and wall_s > 0
