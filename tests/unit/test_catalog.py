"""components/: the generated files are fresh, and every README's example compiles."""

import os
import re

import pytest
from support import cached_against_policy

from tfrecord_suite.kfp import catalog
from tfrecord_suite.kfp.components import COMPONENTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, "components")


def test_committed_specs_and_readmes_are_fresh():
    assert catalog.write(DIR, check=True) == [], "stale: run `make components` and commit"


def test_the_check_catches_a_stale_readme(tmp_path):
    import shutil

    shutil.copytree(DIR, tmp_path / "components")
    (tmp_path / "components" / "data_processing" / "shard" / "README.md").write_text("old\n")
    assert catalog.write(str(tmp_path / "components"), check=True) == [
        str(tmp_path / "components" / "data_processing" / "shard" / "README.md")
    ]


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_readme_example_compiles_with_the_committed_specs(name, tmp_path, monkeypatch):
    """The example in each README, as written, with the released URL read from this
    checkout's components/ (the same files a release tags)."""
    from kfp import compiler, components

    text = open(os.path.join(catalog.folder(name, DIR), "README.md")).read()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    urls = []

    def from_url(url):
        urls.append(url)
        rel = url.removeprefix(catalog.RAW_URL.format(version=catalog.__version__) + "/")
        return components.load_component_from_file(os.path.join(DIR, rel))

    monkeypatch.setattr(components, "load_component_from_url", from_url)
    scope = {}
    exec(compile(code, f"components/{catalog.relative_folder(name)}/README.md", "exec"), scope)
    assert any(u.endswith(f"/{catalog.relative_folder(name)}/component.yaml") for u in urls)
    compiler.Compiler().compile(scope["my_pipeline"], str(tmp_path / "p.yaml"))
    assert cached_against_policy(str(tmp_path / "p.yaml")) == []


def test_the_metadata_rules_refuse_what_upstream_refuses():
    import datetime as dt

    from component_checks import metadata_problems

    now = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
    good = {
        "name": "x",
        "stability": "beta",
        "dependencies": {"kubeflow": [{"name": "Pipelines", "version": ">=2.3.0"}]},
        "lastVerified": dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
    }
    assert metadata_problems(good, now) == []
    for bad in (
        {**good, "tier": "core"},  # removed upstream in Dec 2025
        {**good, "stability": "ga"},
        {**good, "dependencies": {"kubeflow": [{"name": "Pipelines", "version": ">=2.5"}]}},
        {**good, "lastVerified": dt.datetime(2025, 1, 1, tzinfo=dt.UTC)},
        {
            "stability": "beta",
            "name": "x",
            **{k: good[k] for k in ("dependencies", "lastVerified")},
        },
    ):
        assert metadata_problems(bad, now), bad
