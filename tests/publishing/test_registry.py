"""The published versions of a model (tfdist.publishing.registry) on real local directories: version numbers and
names, the listing, the baseline and the lineage, TF Serving's config, the lock, readers' holds and prunes, with
real threads racing. Withdrawal and restore (and through the CLI and the runs page): test_withdraw.py; readers in
other processes and in a bucket: test_prune_readers.py."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

import pytest

from tests.publishing.test_withdraw import publish
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.publishing import registry


@pytest.fixture
def model_dir(tmp_path) -> str:
    """A model directory holding versions 1, 2 and 3, each warm-started from the one before."""
    model_dir = str(tmp_path / "digits")
    for version in (1, 2, 3):
        publish(model_dir, version, parent=version - 1 or None)
    return model_dir


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
    assert registry.baseline_for(model_dir, "2026-11-03T09:00:00+09:00", "run-9").version == 2  # 00:00 UTC
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
        ("bad\nrow", "reason: control characters (escape codes, newlines, NUL) are refused; write it as one line of text"),
        ("\x1b[2J", "reason: control characters (escape codes, newlines, NUL) are refused; write it as one line of text"),
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
    assert sorted(os.listdir(model_dir)) == ["1", "3", "4", registry.LOCK]
    assert registry.prune(model_dir, keep=5, protect=set()) == []


def test_a_version_a_reader_holds_is_spared_until_it_is_released(model_dir):
    with registry.locked(model_dir):
        reader = registry.Reader(model_dir, 1, "run-9")
    assert read_json(reader.path) == {"version": 1, "run_id": "run-9", "host": os.uname().nodename, "pid": os.getpid()}
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
