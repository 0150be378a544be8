"""The stages' command-line arguments (tfdist.contract.stages): every stage names its result record."""

from __future__ import annotations

import dataclasses

from tfdist.contract import stages


def test_every_stage_has_a_result_record_the_plan_finds():
    kinds = stages.StageArgs.__subclasses__()
    assert {k.__name__ for k in kinds} == {"PrepareArgs", "ValidateDataArgs", "TrainArgs", "EvaluateArgs", "ExportArgs"}
    for kind in kinds:
        assert "result" in {f.name for f in dataclasses.fields(kind)}, kind
        values = {f.name: f"/{f.name}" for f in dataclasses.fields(kind) if f.default is dataclasses.MISSING}
        assert kind(**values).result_file == "/result"
