"""Withdrawing a published version and restoring it (issue 29), without Airflow or TensorFlow: the registry on
real directories (one rename, TF Serving's "latest" then the previous version), the baseline and lineage, the
export's version numbers, the runs page's data and ``tfdist models withdraw|restore``. Through the plugin's API on
a live Airflow (auth, the Asset event): tests/live/test_live_airflow.py."""

from __future__ import annotations

import os
import re

import pytest

from tests.web.test_runs_page_data import DAG, write_run
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.operators.cli import main
from tfdist.operators.report import overview
from tfdist.publishing import registry
from tfdist.trainer.export import claim_version


def publish(model_dir: str, version: int, parent: int | None = None) -> str:
    """A published version as export leaves it, at a path or in a bucket: a SavedModel's files and metadata.json
    (last)."""
    path = storage.join(model_dir, str(version))
    for name in ("saved_model.pb", "variables/variables.index"):
        storage.write_bytes(storage.join(path, name), b"")
    write_json_atomic(
        registry.metadata_file(path),
        {
            "version": version,
            "run_id": f"run-{version}",
            "data_interval_end": f"2026-11-{version:02d}T00:00:00+00:00",
            "metrics": {"accuracy": 0.9},
            "parent": parent and {"version": parent, "run_id": f"run-{parent}"},
        },
    )
    return path


def tf_serving_latest(model_dir: str) -> int | None:
    """The version TF Serving's default policy serves: the largest all-digit subdirectory name."""
    numbers = [int(name) for name in os.listdir(model_dir) if name.isdigit()]
    return max(numbers, default=None)


def served_by_config(model_dir: str) -> int | None:
    """The one version ``serving.config`` (TF Serving's model config) names, None for none."""
    config = storage.read_bytes(storage.join(model_dir, registry.SERVING_CONFIG)).decode()
    assert f'base_path: "{model_dir}"' in config
    (named,) = re.findall(r"specific \{([^}]*)\}", config)
    return int(named.split(":")[1]) if named.strip() else None


def tree(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), path) for d, dirs, files in os.walk(path) for f in [*dirs, *files]}


@pytest.fixture
def model_dir(tmp_path) -> str:
    model_dir = str(tmp_path / "digits")
    for version in (1, 2, 3):
        publish(model_dir, version, parent=version - 1 or None)
    return model_dir


def test_a_withdrawn_version_moves_aside_whole_in_one_rename_and_serving_falls_back(model_dir, monkeypatch):
    before = tree(os.path.join(model_dir, "3"))
    renames = []

    def watched_rename(src, dst):
        # just before the move: the version complete in place with its record, nothing aside yet
        assert tree(src) == before | {registry.WITHDRAWN} and not os.path.exists(dst)
        renames.append((src, dst))
        real_rename(src, dst)

    real_rename = os.rename
    monkeypatch.setattr(registry.os, "rename", watched_rename)
    result = registry.withdraw(model_dir, 3, "  labels of 2026-11-03 were shifted  ", by="alice")

    aside = os.path.join(model_dir, registry.WITHDRAWN_DIR, "3")
    assert renames == [(os.path.join(model_dir, "3"), aside)]
    assert tree(aside) == before | {registry.WITHDRAWN} and not os.path.exists(os.path.join(model_dir, "3"))
    assert sorted(os.listdir(model_dir)) == [registry.WITHDRAWN_DIR, "1", "2", registry.SERVING_CONFIG]
    assert tf_serving_latest(model_dir) == 2 == result.live == served_by_config(model_dir)
    record = read_json(os.path.join(aside, registry.WITHDRAWN))
    assert record == result.withdrawn.payload()
    assert (record["version"], record["by"], record["reason"]) == (3, "alice", "labels of 2026-11-03 were shifted")


@pytest.mark.e2e
def test_in_a_bucket_a_withdrawal_is_its_record_in_place_and_the_serving_config_follows(s3):
    """An object store has no rename: the version stays where it is with its withdrawn.json, and TF Serving's config
    names the live version; a restore deletes the record."""
    model_dir = f"s3://{s3.new_bucket()}/models/digits"
    for version in (1, 2, 3):
        path = storage.join(model_dir, str(version))
        storage.write_bytes(storage.join(path, "saved_model.pb"), b"")
        write_json_atomic(
            registry.metadata_file(path),
            {
                "version": version,
                "run_id": f"run-{version}",
                "data_interval_end": f"2026-11-0{version}T00:00:00+00:00",
                "metrics": {"accuracy": 0.9},
            },
        )
    assert registry.write_serving_config(model_dir) == 3 == served_by_config(model_dir)
    result = registry.withdraw(model_dir, 3, "shifted labels", by="alice")
    assert result.live == 2 == served_by_config(model_dir) == registry.live(model_dir)
    assert [m.version for m in registry.versions(model_dir)] == [1, 2]
    assert [(m.version, m.withdrawn and m.withdrawn.by) for m in registry.withdrawn(model_dir)] == [(3, "alice")]
    assert storage.exists(registry.metadata_file(storage.join(model_dir, "3")))
    assert claim_version(model_dir, 3, "other-run", "ckpt")[0] == 4  # a withdrawn number is not published again
    with pytest.raises(registry.RegistryError, match="already withdrawn"):
        registry.withdraw(model_dir, 3, "again", by="bob")
    assert registry.restore(model_dir, 3).live == 3 == served_by_config(model_dir)
    assert registry.withdrawn(model_dir) == [] and len(registry.versions(model_dir)) == 3
    for version in (1, 2, 3):
        registry.withdraw(model_dir, version, "all bad", by="alice")
    assert served_by_config(model_dir) is None


def test_a_withdrawn_version_is_no_baseline_but_stays_in_the_lineage(model_dir):
    registry.withdraw(model_dir, 2, "bad", by="alice")
    assert [m.version for m in registry.versions(model_dir)] == [1, 3]
    (gone,) = registry.withdrawn(model_dir)
    assert gone.withdrawn and (gone.version, gone.withdrawn.by, gone.withdrawn.reason) == (2, "alice", "bad")
    # the next run of 2026-11-02's interval (a backfill) compares with, and warm-starts from, version 1
    assert registry.baseline_for(model_dir, "2026-11-02T00:00:00+00:00", "backfill").version == 1
    assert registry.baseline_for(model_dir, "2026-11-30T00:00:00+00:00", "nightly").version == 3
    chain = registry.lineage(model_dir, 3)
    assert [(m.version, m.withdrawn and m.withdrawn.reason) for m in chain] == [
        (3, None),
        (2, "bad"),
        (1, None),
    ]
    registry.withdraw(model_dir, 3, "bad too", by="bob")
    assert registry.baseline_for(model_dir, "2026-11-30T00:00:00+00:00", "nightly").version == 1


def test_restore_renames_back_and_refuses_over_a_published_version(model_dir):
    registry.withdraw(model_dir, 3, "bad", by="alice")
    result = registry.restore(model_dir, 3)
    assert (result.withdrawn.by, result.withdrawn.reason, result.live) == ("alice", "bad", 3)
    assert tf_serving_latest(model_dir) == 3 and registry.withdrawn(model_dir) == []
    assert not os.path.exists(os.path.join(model_dir, "3", registry.WITHDRAWN))
    with pytest.raises(registry.UnknownVersion, match=r"version 3 of .* is not withdrawn"):
        registry.restore(model_dir, 3)

    registry.withdraw(model_dir, 3, "bad", by="alice")
    publish(model_dir, 3)  # say, copied back by hand
    with pytest.raises(registry.RegistryError, match="a version 3 is published; refusing to replace it"):
        registry.restore(model_dir, 3)
    assert [m.version for m in registry.withdrawn(model_dir)] == [3]


def test_bad_withdrawals_are_refused_and_change_nothing(model_dir):
    with pytest.raises(registry.UnknownVersion, match=r"has no published version 7 \(published: 1, 2, 3\)"):
        registry.withdraw(model_dir, 7, "bad", by="alice")
    with pytest.raises(registry.RegistryError, match="a reason is required"):
        registry.withdraw(model_dir, 3, " \n", by="alice")
    assert sorted(os.listdir(model_dir)) == ["1", "2", "3"] and registry.WITHDRAWN not in os.listdir(
        os.path.join(model_dir, "3")
    )
    registry.withdraw(model_dir, 3, "bad", by="alice")
    with pytest.raises(registry.RegistryError, match=r"version 3 of .* is already withdrawn"):
        registry.withdraw(model_dir, 3, "bad", by="alice")


def test_withdrawing_the_only_version_leaves_none_live(tmp_path):
    model_dir = str(tmp_path / "digits")
    publish(model_dir, 1)
    assert registry.withdraw(model_dir, 1, "bad", by="alice").live is None
    assert tf_serving_latest(model_dir) is None and registry.versions(model_dir) == []


def test_an_export_never_publishes_under_a_withdrawn_number(model_dir):
    registry.withdraw(model_dir, 3, "bad", by="alice")
    assert claim_version(model_dir, 3, "run-9", "/ckpt-9") == (4, False)


def test_the_runs_page_marks_a_withdrawn_version_with_who_and_why(tmp_path):
    root = str(tmp_path)
    for day, version in (("17", 1), ("18", 2)):
        write_run(
            root,
            f"scheduled__2026-11-{day}",
            f"scheduled__2026-11-{day}",
            f"2026-11-{day}T00:00:00+00:00",
            0.95,
            version,
        )
    model_dir = os.path.join(root, "models", "digits")
    registry.withdraw(model_dir, 2, "shifted labels", by="alice")

    page = overview(DAG, [root], [model_dir], {}, {}).model_dump()

    versions = {v["version"]: v for v in page["versions"]}
    assert [(v["version"], v["baseline"]) for v in page["versions"]] == [(2, False), (1, True)]
    assert (versions[2]["withdrawn"]["by"], versions[2]["withdrawn"]["reason"]) == ("alice", "shifted labels")
    assert versions[1]["withdrawn"] is None
    runs = {r["run_id"]: r for r in page["runs"]}
    assert runs["scheduled__2026-11-18"]["export_withdrawn"]["reason"] == "shifted labels"
    assert runs["scheduled__2026-11-17"]["export_withdrawn"] is None


def test_cli_withdraws_and_restores_and_says_what_is_served(model_dir, capsys):
    assert main(["models", "withdraw", model_dir, "3", "--reason", "shifted labels", "--by", "alice"]) == 0
    out = capsys.readouterr().out
    assert (
        f"withdrew version 3 of {model_dir} (by alice: shifted labels); moved to "
        f"{os.path.join(model_dir, '.withdrawn', '3')}" in out
    )
    assert "TF Serving now serves version 2" in out
    assert "no Asset event was emitted" in out and '{"withdrawn": 3, "reason": "shifted labels", "by": "alice"}' in out
    assert main(["models", model_dir]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].startswith(os.path.join(model_dir, "2") + "  run run-2")
    assert listing[-1].startswith(os.path.join(model_dir, ".withdrawn", "3") + "  WITHDRAWN by alice at ")
    assert listing[-1].endswith(": shifted labels")

    assert main(["models", "withdraw", model_dir, "3", "--reason", "again"]) == 2
    assert "version 3 of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["models", "withdraw", model_dir, "2"])
    assert "--reason is required" in capsys.readouterr().err

    assert main(["models", "restore", model_dir, "3"]) == 0
    out = capsys.readouterr().out
    assert "restored version 3" in out and "(withdrawn by alice: shifted labels)" in out
    assert "TF Serving now serves version 3" in out


def test_cli_says_plainly_when_no_version_is_left(tmp_path, capsys):
    model_dir = str(tmp_path / "digits")
    publish(model_dir, 1)
    assert main(["models", "withdraw", model_dir, "1", "--reason", "bad"]) == 0
    assert "no published version of digits is left: TF Serving serves none" in capsys.readouterr().out


def test_a_reason_is_one_line_of_at_most_the_limit_and_a_refused_one_changes_nothing(model_dir, capsys):
    for reason, problem in [
        ("x" * 200_000, f"at most {registry.REASON_MAX_CHARS}"),
        ("fine\x1b[2J\x1b[31mpwned", "control characters"),
        ("two\nlines", "control characters"),
    ]:
        with pytest.raises(registry.RegistryError, match=f"^reason: .*{re.escape(problem)}"):
            registry.withdraw(model_dir, 3, reason, "mallory")
        assert main(["models", "withdraw", model_dir, "3", "--reason", reason]) == 2
        assert problem in capsys.readouterr().err
    assert registry.withdraw(model_dir, 3, "y" * registry.REASON_MAX_CHARS, "alice").withdrawn.reason == "y" * 2000
    assert [m.version for m in registry.versions(model_dir)] == [1, 2]


def test_the_cli_escapes_control_characters_of_a_record_it_prints(model_dir, capsys):
    registry.withdraw(model_dir, 3, "written before reasons were checked", "alice")
    record = os.path.join(registry.withdrawn_path(model_dir, 3), registry.WITHDRAWN)
    write_json_atomic(record, {**read_json(record), "reason": "ok\x1b]0;owned\x07\x1b[2J", "by": "eve\r"})
    assert main(["models", model_dir]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert out.splitlines()[-1].endswith(
        r"WITHDRAWN by eve\r at " + read_json(record)["at"] + r": ok\x1b]0;owned\x07\x1b[2J"
    )
    assert main(["models", "restore", model_dir, "3"]) == 0
    assert r"(withdrawn by eve\r: ok\x1b]0;owned" in capsys.readouterr().out


@pytest.mark.parametrize("version", ["\u0661", "\uff13", "1.0", "-1", ""])
def test_the_cli_takes_a_version_in_ascii_digits_only(model_dir, capsys, version):
    with pytest.raises(SystemExit):
        main(["models", "withdraw", model_dir, version, "--reason", "bad"])
    assert "VERSION (ASCII digits 0-9" in capsys.readouterr().err
    assert [m.version for m in registry.versions(model_dir)] == [1, 2, 3]


def test_a_version_directory_named_in_other_digits_is_no_version(model_dir):
    os.rename(os.path.join(model_dir, "1"), os.path.join(model_dir, "\u0661"))
    assert [m.version for m in registry.versions(model_dir)] == [2, 3]


def test_tfdist_runs_never_reads_outside_the_artifact_root(tmp_path, capsys, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    write_run(str(outside), "scheduled__1", "scheduled__1", "2026-11-17T00:00:00+00:00", 0.9)
    os.makedirs(root)
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", str(root))
    for pipeline in (f"../outside/{DAG}", "..", ".", str(outside / DAG), "dig\x1bits"):
        assert main(["runs", pipeline]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("pipeline_id: ") and "\x1b" not in captured.err and not captured.out
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", str(outside))
    assert main(["runs", DAG]) == 0 and "scheduled__1" in capsys.readouterr().out  # the same run, inside its root


def test_tfdist_runs_escapes_a_run_id_and_overrides_a_trigger_chose(tmp_path, capsys, monkeypatch):
    layout = write_run(str(tmp_path), "manual__x", "manual__\x1b[2Jx", "2026-11-17T00:00:00+00:00", 0.9)
    write_json_atomic(layout.run_file, {**read_json(layout.run_file), "overrides": {"note": "\x1b]0;hi\x07"}})
    monkeypatch.setenv("TFDIST_ARTIFACT_ROOT", str(tmp_path))
    assert main(["runs", DAG]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and r"manual__\x1b[2Jx" in out and r"note=\x1b]0;hi\x07" in out
