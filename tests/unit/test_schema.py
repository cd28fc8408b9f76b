import pytest

from tfrecord_suite.schema import (
    Feature,
    Schema,
    SchemaError,
    diff_schemas,
    infer_tabular_schema,
    safe_feature_name,
)


def test_infers_types_label_and_missing_values():
    rows = [
        {"species": "Adelie", "bill length (mm)": "39.1", "year": "2007", "sex": "male"},
        {"species": "Gentoo", "bill length (mm)": "NA", "year": "2008", "sex": ""},
    ]
    s = infer_tabular_schema(["species", "bill length (mm)", "year", "sex"], rows)
    assert s.label == "species"
    assert s.label_classes == ["Adelie", "Gentoo"]
    f = s.feature("bill_length__mm")
    assert (f.dtype, f.kind, f.source) == ("float32", "numeric", "bill length (mm)")
    assert s.feature("year").dtype == "int64"
    assert s.feature("sex").kind == "categorical"
    assert [x.name for x in s.input_features] == ["bill_length__mm", "year", "sex"]


def test_unknown_label_column_is_named():
    with pytest.raises(SchemaError, match="label column 'nope' not found"):
        infer_tabular_schema(["a"], [{"a": "1"}], label="nope")


def test_roundtrip_and_validation():
    s = Schema(
        [Feature("x", "float32"), Feature("y", "int64", kind="categorical")],
        label="y",
        label_classes=["0", "1"],
    )
    assert Schema.from_json(s.to_json()) == s
    with pytest.raises(SchemaError, match="dtype"):
        Schema([Feature("x", "double")])
    with pytest.raises(SchemaError, match="duplicate"):
        Schema([Feature("x", "int64"), Feature("x", "int64")])
    with pytest.raises(SchemaError, match="unknown keys"):
        Schema.from_dict({"features": [{"name": "x", "dtype": "int64", "bogus": 1}]})
    with pytest.raises(SchemaError, match="letters, digits"):
        Schema([Feature("../x", "int64")])


def test_safe_names():
    assert safe_feature_name("od280/od315 of wine") == "od280_od315_of_wine"
    assert safe_feature_name("3d") == "f_3d"


def test_diff_breaking_and_compatible():
    old = Schema([Feature("a", "int64"), Feature("b", "string", kind="categorical")])
    new = Schema([Feature("a", "float32"), Feature("c", "int64")])
    d = diff_schemas(old, new)
    assert "feature 'b' removed" in d["breaking"]
    assert any("dtype int64 -> float32" in x for x in d["breaking"])
    assert any("'c' added" in x for x in d["compatible"])
