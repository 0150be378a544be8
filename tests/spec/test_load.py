"""The only way in (tfdist.spec.load): a spec given as a dict, a YAML (or JSON) file or a ``Spec``, validated; a
file that cannot be read is a SpecError naming it."""

from __future__ import annotations

import pytest
import yaml

from tests.support.specs import make_spec
from tfdist.spec import SpecError, load_spec
from tfdist.spec.load import read_yaml


def test_valid_spec_round_trips(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    again = load_spec(spec.to_json_dict())
    assert again == spec
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.to_json_dict()))
    assert load_spec(path) == spec


def test_error_message_names_the_origin(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n")
    with pytest.raises(SpecError, match=f"Invalid pipeline spec file {path}"):
        load_spec(path)


def test_a_spec_is_returned_as_it_is_and_an_origin_given_names_the_problems(tmp_path):
    spec = load_spec(make_spec(str(tmp_path)))
    assert load_spec(spec) is spec
    with pytest.raises(SpecError) as err:
        load_spec({**make_spec(str(tmp_path)), "colour": "blue"}, origin="spec of DAG file x.py")
    assert str(err.value).startswith(
        "Invalid pipeline spec of DAG file x.py:\n  <spec>: unknown key 'colour'; allowed keys: name, "
    )


def test_a_file_that_is_no_yaml_or_is_missing_is_named_as_unreadable(tmp_path):
    (bad := tmp_path / "bad.yaml").write_text("name: [x\n")
    with pytest.raises(SpecError) as err:
        load_spec(bad)
    (problem,) = err.value.problems
    assert problem.startswith("<file>: cannot read YAML: while parsing a flow sequence")
    assert str(err.value).startswith(f"Invalid pipeline spec file {bad}:")
    with pytest.raises(SpecError, match=r"<file>: cannot read YAML: \[Errno 2\] No such file or directory"):
        load_spec(tmp_path / "missing.yaml")


def test_yaml_reads_as_pyyamls_safe_loader_reads_it():
    text = "a: 1\nb: [yes, '2026-11-01', 2026-11-01, 1e3, ~]\nc: !!str 5\n"
    assert read_yaml(text) == yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError):
        read_yaml("a: !!python/object:os.system ls\n")


def test_a_files_problems_name_the_origin_given_instead_of_the_file(tmp_path):
    (path := tmp_path / "bad.yaml").write_text("name: x\n")
    with pytest.raises(SpecError, match=r"^Invalid pipeline spec of DAG file x\.py:\n"):
        load_spec(path, origin="spec of DAG file x.py")
