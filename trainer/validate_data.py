"""Stage validate_data: the data gate before training. This run's data statistics (its data manifest's) against
the baseline's: the data that the newest version published as of this run's data interval was trained on (the
model gate's baseline, by the same as-of rule), kept beside that version. Writes ``data_validation.json``; a
failed check in mode 'refuse' ends the stage with EXIT_REFUSED, naming each: nothing is trained."""

from __future__ import annotations

import os

from tfdist.contract.data_records import BaselineRef, DataStatistics, DataValidation, ValidateDataResult
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.records import read_record, read_record_if_exists, write_record
from tfdist.contract.stages import ValidateDataArgs
from tfdist.contract.train_records import RunRecord
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json_if_exists
from tfdist.publishing import registry
from tfdist.publishing.data_gate import DATA_VALIDATION, FORMULAS, Vocabularies, checks, failure_line, not_compared
from tfdist.spec.model import Spec
from tfdist.trainer import data
from tfdist.trainer.runtime import fail, load_spec, run_stage, say


def baseline_statistics(
    args: ValidateDataArgs, run: RunRecord, now: DataStatistics
) -> tuple[BaselineRef | None, DataStatistics | None, str]:
    """(the baseline version's record, its data statistics, why there is none to compare with)."""
    baseline = registry.baseline_for(args.model_dir, run.data_interval_end, run.run_id)
    if baseline is None:
        return None, None, "no baseline: nothing published as of this data interval"
    statistics = read_record_if_exists(storage.join(baseline.path, registry.DATA_STATISTICS), DataStatistics)
    record = BaselineRef(version=baseline.version, run_id=baseline.metadata.run_id, path=baseline.path)
    if statistics is None:
        return (
            record,
            None,
            f"baseline version {record.version} has no {registry.DATA_STATISTICS} (published by an earlier tfdist)",
        )
    if statistics.bins != now.bins:
        return record, None, f"baseline version {record.version}'s histograms are binned otherwise"
    return record, statistics, ""


def baseline_vocabularies(spec: Spec, baseline: BaselineRef | None) -> Vocabularies:
    """The baseline version's vocabulary of each categorical feature that maps through one now (a hashed feature
    has none to check); None for a feature the version has no vocabulary of."""
    if baseline is None:
        return {}
    directory = registry.vocabulary_dir(baseline.path)
    paths = {f.name: storage.join(directory, f"{f.name}.json") for f in spec.data.categorical_features if f.encoding}
    return {name: read_json_if_exists(path) for name, path in paths.items()}


def decision_record(args: ValidateDataArgs, spec: Spec, run: RunRecord, now: DataStatistics) -> DataValidation:
    baseline, base, missing = baseline_statistics(args, run, now)
    vocabularies = baseline_vocabularies(spec, baseline if base is not None else None)
    rows = checks(now, base, spec.data.checks, vocabularies)
    refused = [failure_line(r) for r in rows if not r.passed and r.mode == "refuse"]
    warned = [failure_line(r) for r in rows if not r.passed and r.mode == "warn"]
    return DataValidation(
        decision="refused" if refused else "passed",
        run_id=run.run_id,
        data_interval_end=run.data_interval_end,
        baseline=baseline,
        baseline_version=baseline.version if baseline else None,
        compared=base is not None,
        why_not_compared=missing or None,
        not_compared=not_compared(now, base, vocabularies) if base is not None else [],
        settings=spec.data.checks.model_dump(mode="json"),
        formulas=FORMULAS,
        checks=rows,
        checks_run=len(rows),
        failed=sum(not r.passed for r in rows),
        refused=refused,
        warned=warned,
        statistics=now,
        baseline_statistics=base,
    )


def main() -> None:
    args = ValidateDataArgs.parse()
    spec, run = load_spec(args.spec), read_record(args.run, RunRecord)
    now = data.verified_manifest(args.data)[0].statistics
    record = decision_record(args, spec, run, now)
    write_record(os.path.join(args.out, DATA_VALIDATION), record)
    write_record(args.result, ValidateDataResult.of(record))
    if record.why_not_compared:
        say(f"{record.why_not_compared}: only the checks that need no baseline apply")
    else:
        say(f"compared with the data of baseline version {record.baseline_version}")
    for note in record.not_compared:
        say(f"not compared: {note.feature}: {note.why}")
    say(f"{record.checks_run} checks, {record.failed} failed")
    for line in record.warned:
        say(f"WARNING (data.checks mode warn): {line}")
    if record.refused:
        fail(
            "the data gate refused this run's data, nothing was trained:\n  "
            + "\n  ".join(record.refused)
            + "\nIf the data is right, loosen the check in the spec's data.checks (or set its mode to warn), "
            "then clear validate_data",
            EXIT_REFUSED,
        )
    say("data gate passed")


if __name__ == "__main__":
    run_stage(main)
