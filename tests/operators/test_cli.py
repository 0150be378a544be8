"""operators/cli.py: ``tfdist validate``, ``tfdist models`` and ``tfdist runs`` on real spec files, run directories and
published versions. ``tfdist plan``: tests/plan/test_windows.py; ``tfdist schema``: tests/spec/test_schema.py;
``tfdist models withdraw | restore``: tests/publishing/test_withdraw.py; ``tfdist demo``: tests/live/test_demo.py."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.operators.test_report import (
    DAG,
    MISMATCH,
    write_binary_runs,
    write_data_gate,
    write_lineage,
    write_run,
)
from tests.support.specs import make_spec
from tfdist.operators.cli import main


def test_tfdist_models_lists_each_versions_parent_or_cold_start(tmp_path, capsys):
    model_dir = write_lineage(str(tmp_path))
    assert main(["models", model_dir]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("accuracy=0.9500 loss=0.1000  ")[1] for line in lines] == [
        "warm start from v3",
        "warm start from v2",
        f"cold start: {MISMATCH}",
        "-",
    ]
    assert lines[0].startswith(os.path.join(model_dir, "4") + "  run scheduled__2026-11-14  ")


def test_tfdist_runs_shows_the_specs_first_metric_and_the_loss_and_the_data_gates_categorical_failures(
    tmp_path, capsys, monkeypatch
):
    _, warned = write_binary_runs(str(tmp_path))
    record = write_data_gate(warned)
    regression = {"task": "regression", "metrics": ["rmse", "r2"]}
    write_run(str(tmp_path), "manual__r", "manual__r", "2026-11-19T00:00:00+00:00", None, task=regression)
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", str(tmp_path))
    assert main(["runs", DAG]) == 0
    table, failures = capsys.readouterr().out.split("\n\ndata gate, categorical features:\n")
    header, *rows = table.splitlines()
    assert header.split() == ["run", "window", "overrides", "data", "parent", "rmse", "auc", "loss", "gate", "version"]
    assert rows[1].split()[-5:] == ["-", "0.8200", "0.4300", "blessed", "2"]  # no rmse: a binary run
    assert rows[1].split()[5:7] == ["passed", "(warned)"]
    expected = [line for line in record["warned"] if line.startswith(("drift: country", "vocabulary: country"))]
    assert failures.splitlines() == [f"  scheduled__2  {line}" for line in expected] and len(expected) == 2
    assert len(record["warned"]) == 3 and record["warned"][2].startswith("labels: class yes")  # not categorical
    assert "(value 'DE': share 0.45, baseline 0.3)" in expected[0]


def test_validate_names_the_pipeline_of_a_valid_spec_and_every_problem_of_an_invalid_one(tmp_path, capsys):
    valid, invalid = tmp_path / "valid.yaml", tmp_path / "invalid.yaml"
    valid.write_text(yaml.safe_dump(make_spec(str(tmp_path))))
    invalid.write_text(yaml.safe_dump(make_spec(str(tmp_path), training={"num_workers": 0, "epochs": 0})))
    assert main(["validate", str(valid)]) == 0
    assert capsys.readouterr().out == f"{valid}: valid (pipeline digits_test)\n"
    assert main(["validate", str(invalid)]) == 2
    problems = capsys.readouterr().err
    assert "training.num_workers: Input should be greater than or equal to 1" in problems
    assert "training.epochs: Input should be greater than or equal to 1" in problems


@pytest.mark.parametrize(
    "words, refusal",
    [
        (["a", "b"], "models: expected MODEL_DIR, or withdraw or restore MODEL_DIR VERSION"),
        (["withdraw", "dir", "v3"], "models withdraw: expected MODEL_DIR VERSION (ASCII digits 0-9"),
        (["restore", "dir"], "models restore: expected MODEL_DIR VERSION"),
        (["withdraw", "dir", "3"], "models withdraw: --reason is required"),
    ],
)
def test_models_refuses_words_it_cannot_read_naming_what_it_expects(words, refusal, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["models", *words])
    assert exited.value.code == 2 and refusal in capsys.readouterr().err


def test_models_of_a_directory_without_versions_says_so(tmp_path):
    with pytest.raises(SystemExit, match=f"no versions published in {tmp_path}"):
        main(["models", str(tmp_path)])
