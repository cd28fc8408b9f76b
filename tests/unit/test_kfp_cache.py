"""The cache-key stand-in (tests/fakes/kfp_cache.py) reproduces kubeflow/pipelines'
backend/src/v2/cacheutils/cache_test.go TestGenerateFingerPrint and Go's JSON encoding."""

import pytest

from fakes.kfp_cache import _go_float, _go_str, fingerprint

SCHEMA = (
    "title: kfp.Model\ntype: object\nproperties:\n  framework:\n    type: string\n"
    "  framework_version:\n    type: string\n"
)


def test_upstream_test_vectors():
    first = {
        "inputArtifactNames": {
            "dataset_one": {"artifactNames": ["1"]},
            "dataset_two": {"artifactNames": ["2"]},
        },
        "inputParameterValues": {"message": "Some string value", "num_steps": 5},
        "outputArtifactsSpec": {
            "model": {"name": "model", "type": {"instanceSchema": SCHEMA},
                      "metadata": {"name": "model"}},
            "metrics": {"name": "metrics", "type": {"schemaTitle": "kfp.Metrics"},
                        "metadata": {"name": "metrics"}},
        },
        "outputParametersSpec": {"output_parameter_one": "STRING", "output_parameter_two": "INT"},
        "containerSpec": {"cmdArgs": ["sh", "ec", "test"], "image": "python:3.11"},
    }  # fmt: skip
    second = {
        "inputArtifactNames": {"dataset": {"artifactNames": ["10"]}},
        "outputParametersSpec": {"output_parameter": "DOUBLE"},
        "containerSpec": {"cmdArgs": ["sh", "ec", "run"], "image": "python:3.11"},
    }
    assert fingerprint(first) == "b498530c9016917298999ec0b01f364a180f8a3862bea0fa672a383ca3f22e4e"
    assert fingerprint(second) == "3d9a2a778fa3174c6cfc6e639c507c265b5f21ef6e5b1dd70b236462cc6da464"


@pytest.mark.parametrize(
    ("value", "go"),
    [(5.0, "5"), (0.1, "0.1"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (1e21, "1e+21"),
     (1.2345678901234568e20, "123456789012345680000"), (1e-5, "0.00001"), (-2.5, "-2.5")],
)  # fmt: skip
def test_go_number_formatting(value, go):
    assert _go_float(value) == go


def test_go_string_escaping():
    assert _go_str("a && b > c") == '"a \\u0026\\u0026 b \\u003e c"'
