"""The published versions of a model (tfdist.publishing.registry) on real directories: version numbers and names,
the listing, the baseline and the lineage, TF Serving's config, withdrawal and restore (locally one rename; in a
bucket a record in place), the lock, readers' holds and prunes, with real threads racing. Through the CLI and the
runs page: test_withdraw.py; readers in other processes and in a bucket: test_prune_readers.py."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

import pytest

from tests.publishing.test_withdraw import publish, served_by_config, tf_serving_latest, tree
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.publishing import registry
from tfdist.trainer.export import claim_version


def numbers(found: list[registry.PublishedVersion]) -> list[int]:
    return [m.version for m in found]


def test_a_version_number_is_the_intervals_utc_minute_then_two_digits_for_its_exports():
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert registry.version_number(dt.datetime(2026, 11, 21, 9, 30, tzinfo=tokyo)) == 20261121003000
    assert registry.version_number(dt.datetime(2026, 11, 21, tzinfo=dt.UTC)) == 202611210000 * 100


def test_a_version_name_is_ascii_digits_only():
    assert registry.is_version_name("20261121000000")
    assert not any(registry.is_version_name(n) for n in ("\u0661", "\uff13", "1.0", "-1", "", ".withdrawn"))


def test_the_listing_is_every_numbered_directory_with_metadata_oldest_first(model_dir):
    os.makedirs(os.path.join(model_dir, "4"))  # being exported: no metadata.json yet
    publish(model_dir, 10)
    os.makedirs(os.path.join(model_dir, "v11"))
    found = registry.versions(model_dir)
    assert numbers(found) == [1, 2, 3, 10] and found[0].path == os.path.join(model_dir, "1")
    assert found[-1].metadata.run_id == "run-10" and found[-1].withdrawn is None
    assert registry.live(model_dir) == 10 and registry.withdrawn(model_dir) == []
    assert registry.versions(os.path.join(model_dir, "missing")) == []
    assert registry.live(os.path.join(model_dir, "missing")) is None


def test_the_baseline_is_the_newest_version_another_run_published_for_an_interval_ending_by_this_ones(model_dir):
    assert registry.baseline_for(model_dir, "2026-11-02T12:00:00+00:00", "run-9").version == 2
    assert registry.baseline_for(model_dir, "2026-11-03T00:00:00+00:00", "run-3").version == 2  # not its own
    assert (
        registry.baseline_for(model_dir, "2026-11-03T08:00:00+09:00", "run-9").version == 2
    )  # 23:00 UTC the day before
    assert registry.baseline_for(model_dir, "2026-10-31T00:00:00+00:00", "run-9") is None


def test_the_lineage_follows_parents_to_a_cold_start_or_a_version_no_longer_kept(model_dir):
    assert numbers(registry.lineage(model_dir, 3)) == [3, 2, 1]
    publish(model_dir, 5, parent=4)
    assert numbers(registry.lineage(model_dir, 5)) == [5]
    assert registry.lineage(model_dir, 9) == []


def test_a_lineage_whose_parents_loop_ends_after_each_version_once(tmp_path):
    model_dir = str(tmp_path / "digits")
    publish(model_dir, 1, parent=2)
    publish(model_dir, 2, parent=1)
    assert numbers(registry.lineage(model_dir, 2)) == [2, 1]


def test_the_serving_config_names_the_live_version_alone(model_dir):
    assert registry.write_serving_config(model_dir) == 3
    with open(os.path.join(model_dir, registry.SERVING_CONFIG)) as f:
        assert f.read() == (
            "model_config_list {\n  config {\n"
            f'    name: "digits"\n    base_path: "{model_dir}"\n    model_platform: "tensorflow"\n'
            "    model_version_policy {\n      specific {\n        versions: 3\n      }\n    }\n"
            "  }\n}\n"
        )
    assert "versions:" not in registry.serving_config("s3://b/models/digits/", None)
    assert 'name: "digits"' in registry.serving_config("s3://b/models/digits/", None)


@pytest.mark.parametrize(
    "reason, problem",
    [
        ("", "reason: a reason is required to withdraw a version (say why it is bad)"),
        (" \t", "reason: a reason is required to withdraw a version (say why it is bad)"),
        ("x" * 2001, "reason: 2001 characters; at most 2000 (link to a longer account)"),
        (
            "bad\nrow",
            "reason: control characters (escape codes, newlines, NUL) are refused; write it as one line of text",
        ),
        (
            "\x1b[2J",
            "reason: control characters (escape codes, newlines, NUL) are refused; write it as one line of text",
        ),
    ],
)
def test_a_withdrawal_reason_is_one_line_of_at_most_the_limit(reason, problem):
    assert registry.reason_problem(reason) == problem


def test_a_reason_at_the_limit_once_stripped_is_taken():
    assert registry.reason_problem("  " + "x" * registry.REASON_MAX_CHARS + "  ") is None


def test_a_prune_keeps_the_newest_and_the_protected_and_finishes_an_unfinished_one(model_dir):
    publish(model_dir, 4)
    os.makedirs(os.path.join(model_dir, f"{registry.HIDDEN_PREFIX}0", "variables"))  # a prune died deleting 0
    assert registry.prune(model_dir, keep=2, protect={1}) == [2]
    assert numbers(registry.versions(model_dir)) == [1, 3, 4]
    assert sorted(os.listdir(model_dir)) == [registry.LOCK, "1", "3", "4"]
    assert registry.prune(model_dir, keep=5, protect=set()) == []


def test_a_version_a_reader_holds_is_spared_until_it_is_released(model_dir):
    with registry.locked(model_dir):
        reader = registry.Reader(model_dir, 1, "run-9")
    host, pid = os.uname().nodename, os.getpid()  # a local reader's lease is its process: no "until"
    assert read_json(reader.path) == {
        "schema_version": 1,
        "version": 1,
        "run_id": "run-9",
        "host": host,
        "pid": pid,
        "until": None,
    }
    assert registry.held(model_dir) == {1}
    assert registry.prune(model_dir, keep=1, protect=set()) == [2]
    reader.release()
    assert registry.held(model_dir) == set() and registry.prune(model_dir, keep=1, protect=set()) == [1]


def test_a_marker_nobody_locks_is_a_dead_processs_and_is_deleted(model_dir):
    marker = os.path.join(model_dir, registry.READERS_DIR, "dead.json")
    write_json_atomic(marker, {"version": 1, "run_id": "run-9", "host": "h", "pid": 1})
    assert registry.held(model_dir) == set() and not os.path.exists(marker)


def test_the_held_baseline_is_held_while_it_is_read_and_no_model_directory_is_made(model_dir, tmp_path):
    with registry.held_baseline(model_dir, "2026-11-02T00:00:00+00:00", "run-9") as baseline:
        assert baseline.version == 2 and registry.held(model_dir) == {2}
    assert registry.held(model_dir) == set()
    with registry.held_baseline(str(tmp_path / "none"), "2026-11-02T00:00:00+00:00", "run-9") as nothing:
        assert nothing is None
    assert not os.path.exists(tmp_path / "none")


def test_the_lock_admits_one_thread_at_a_time(tmp_path):
    """Writers racing on a counter under ``locked``: every increment lands (flock between open files)."""
    model_dir, counter = str(tmp_path / "digits"), str(tmp_path / "counter.json")
    write_json_atomic(counter, 0)

    def bump() -> None:
        for _ in range(5):
            with registry.locked(model_dir):
                seen = read_json(counter)
                time.sleep(0.002)
                write_json_atomic(counter, seen + 1)

    threads = [threading.Thread(target=bump) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert read_json(counter) == 30


def test_a_prune_racing_readers_never_deletes_what_they_chose(tmp_path):
    """Threads choosing a baseline and holding it while a prune runs: each read version still exists."""
    model_dir = str(tmp_path / "digits")
    for version in range(1, 9):
        publish(model_dir, version)
    chosen: dict[int, bool] = {}

    def read(day: int) -> None:
        with registry.held_baseline(model_dir, f"2026-11-{day:02d}T00:00:00+00:00", "run-0") as baseline:
            time.sleep(0.01)
            if baseline:  # none left for its day when the prune came first
                chosen[baseline.version] = os.path.exists(registry.metadata_file(baseline.path))

    readers = [threading.Thread(target=read, args=(day,)) for day in (1, 2, 3)]
    for thread in readers:
        thread.start()
    pruned = registry.prune(model_dir, keep=1, protect=set())
    for thread in readers:
        thread.join()
    assert all(chosen.values()) and set(pruned) <= set(range(1, 8))
    assert numbers(registry.versions(model_dir))[-1] == 8


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


@pytest.mark.e2e  # a store server: in make test, not in the unit tier
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
