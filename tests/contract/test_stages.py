"""The stages' command-line arguments (tfdist.contract.stages): every stage names its result record, and what the
Airflow side writes (``to_argv``, ``command``) the stage's entry point reads back (``parse``)."""

from __future__ import annotations

import dataclasses

import pytest

from tfdist.contract import stages
from tfdist.contract.stages import ExportArgs, PrepareArgs, ValidateDataArgs


def test_every_stage_has_a_result_record_the_plan_finds():
    kinds = stages.StageArgs.__subclasses__()
    assert {k.__name__ for k in kinds} == {"PrepareArgs", "ValidateDataArgs", "TrainArgs", "EvaluateArgs", "ExportArgs"}
    for kind in kinds:
        assert "result" in {f.name for f in dataclasses.fields(kind)}, kind
        values = {f.name: f"/{f.name}" for f in dataclasses.fields(kind) if f.default is dataclasses.MISSING}
        assert kind(**values).result_file == "/result"


def test_a_worker_command_runs_the_module_of_the_worker_package():
    assert stages.worker_command("/venv/bin/python", "train") == ["/venv/bin/python", "-m", "tfdist.trainer.train"]


def test_fields_become_flags_a_tuple_repeated_a_default_left_out():
    args = PrepareArgs(spec="/r/spec.json", out="/r/data", result="/r/prepare/result.json", source=("/in/a", "/in/b"))
    assert args.to_argv() == [
        "--spec", "/r/spec.json",
        "--out", "/r/data",
        "--result", "/r/prepare/result.json",
        "--source", "/in/a",
        "--source", "/in/b",
    ]  # fmt: skip
    with_pods = dataclasses.replace(args, pods=3, coordination="/r/meet")
    assert with_pods.to_argv()[-4:] == ["--pods", "3", "--coordination", "/r/meet"]
    assert with_pods.command("py") == ["py", "-m", "tfdist.trainer.prepare", *with_pods.to_argv()]


def test_what_the_airflow_side_writes_the_stage_reads_back_as_the_same_arguments():
    for args in (
        PrepareArgs(spec="/s", out="/o", result="/r", source=("/a",), pods=2, coordination="/c"),
        PrepareArgs(spec="/s", out="/o", result="/r", source=("/a", "/b")),
        ExportArgs(
            spec="/s",
            run="/run",
            data="/d",
            model_dir="/m",
            eval="/e",
            train_result="/t",
            warm_start_record="/w",
            version_base=202611210000,
            result="/r",
        ),
    ):
        assert type(args).parse(args.to_argv()) == args  # numbers as numbers: "2" != 2


def test_a_missing_required_argument_is_refused_by_its_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        ValidateDataArgs.parse(["--spec", "/s", "--run", "/run", "--data", "/d", "--out", "/o", "--result", "/r"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (
        "python -m tfdist.trainer.validate_data" in err and "the following arguments are required: --model-dir" in err
    )
