"""pyproject.toml lists its packages by hand (the ready pipelines install from the top-level
pipelines/ folder as tfrecord_suite.pipelines): every package under src/ must be listed."""

import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_package_is_installed():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        setuptools = tomllib.load(fh)["tool"]["setuptools"]
    found = {
        os.path.relpath(d, os.path.join(ROOT, "src")).replace(os.sep, ".")
        for d, _, files in os.walk(os.path.join(ROOT, "src"))
        if "__init__.py" in files
    }
    assert set(setuptools["packages"]) == found | {"tfrecord_suite.pipelines"}
    assert setuptools["package-dir"]["tfrecord_suite.pipelines"] == "pipelines"
    assert os.path.isfile(os.path.join(ROOT, "pipelines", "__init__.py"))
