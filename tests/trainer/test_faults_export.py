"""Runs and exports under faults (fault cases 4 and 7): two runs of one data interval prepared, trained,
evaluated and exported at the same time (separate run directories, distinct versions, a consistent
registry); an export SIGKILLed at random moments (never a visible partial version; the next export
publishes exactly once; the registry lists every version once). Each trial records its figures."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import shutil
import signal
import threading
import time

import pytest

from tests.publishing.versions import published_metadata
from tests.support.faults import FAULT_TRIALS
from tests.support.logs import collecting_logger
from tests.support.plans import plan_for, run
from tests.support.processes import wait_for
from tfdist.infra.jsonfiles import read_json, write_json_atomic
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.publishing import registry
from tfdist.trainer.export import claim_version

RUNS = ("concurrent_a", "concurrent_b")
EXPORT_KILLS = 4 * FAULT_TRIALS if FAULT_TRIALS > 1 else 1  # make faults (5 trials): 20
SECTIONS = {
    "training": {"num_workers": 1, "epochs": 3},
    "validation": {"thresholds": {"accuracy": {"lower": 0.5}}},
    "export": {"model_name": "digits_faults"},
}


def at_once(plans, task_id: str) -> None:
    """Run the stage of every plan at the same time; raise the first failure."""
    failures = []

    def one(plan):
        try:
            run(plan, task_id)
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(plan,)) for plan in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def visible_versions(model_dir: str) -> list[int]:
    """Every version a model server would see, each checked complete (a SavedModel and its metadata)."""
    found = sorted(int(d) for d in os.listdir(model_dir) if d.isdigit())
    for version in found:
        path = os.path.join(model_dir, str(version))
        assert {"saved_model.pb", "variables", "metadata.json"} <= set(os.listdir(path)), f"partial {path}"
        assert read_json(os.path.join(path, "metadata.json"))["version"] == version
    assert [m.version for m in registry.versions(model_dir)] == found  # each once
    return found


def leftovers(model_dir: str) -> list[str]:
    return [d for d in os.listdir(model_dir) if d.startswith((".tmp-", ".claim-"))]


@pytest.fixture(scope="module")
def concurrent_runs(digits_root):
    """Two runs of the same data interval, every stage of both run at the same time."""
    plans = [plan_for(digits_root, run_id, **SECTIONS) for run_id in RUNS]
    for task_id in ("prepare_data", "validate_data", "train", "evaluate", "export"):
        at_once(plans, task_id)
    return plans


@pytest.mark.e2e
@pytest.mark.faults
@pytest.mark.extended
def test_two_runs_of_one_interval_at_once_keep_their_own_directories_and_get_distinct_versions(
    concurrent_runs, fault_figures
):
    a, b = concurrent_runs
    assert a.layout.run_dir != b.layout.run_dir and a.model_dir == b.model_dir
    for plan in concurrent_runs:
        assert read_json(plan.layout.run_file)["run_id"] == plan.context.run_id
        assert read_json(plan.layout.blessing_file)["run_id"] == plan.context.run_id
        result = read_json(plan.layout.result("train"))
        assert result["checkpoint"].startswith(plan.layout.checkpoint_dir) and result["resumed_from_step"] == 0
    published = {m["run_id"]: m["version"] for m in published_metadata(a.model_dir)}
    assert sorted(published) == sorted(RUNS) and len(set(published.values())) == 2, published
    assert sorted(published.values()) == visible_versions(a.model_dir) and leftovers(a.model_dir) == []
    for plan in concurrent_runs:  # each run's export record names its own version
        assert read_json(plan.layout.result("export"))["version"] == published[plan.context.run_id]
    fault_figures(
        "7 two runs of one interval at once",
        "local",
        separate_run_dirs=True,
        distinct_versions=True,
        registry_consistent=True,
    )


BASE = 20261120000000


def claim_at_once(model_dir: str, run_id: str, barrier, claims) -> None:
    barrier.wait()
    claims.put((run_id, claim_version(model_dir, BASE, run_id, f"{run_id}/ckpt-1")))


def test_exports_claiming_a_version_at_the_same_moment_get_distinct_ones(tmp_path):
    """Eight processes released together by a barrier: the exclusive claim gives each its own version."""
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(8), context.Queue()
    racers = [context.Process(target=claim_at_once, args=(str(tmp_path), f"run-{n}", barrier, queue)) for n in range(8)]
    for p in racers:
        p.start()
    claims = dict(queue.get(timeout=30) for _ in racers)
    for p in racers:
        p.join(30)
    assert sorted(claims.values()) == [(BASE + n, False) for n in range(8)], claims
    # a rerun of a killed export takes its own claim back; once published, it finds its version
    assert claim_version(str(tmp_path), BASE, "run-3", "run-3/ckpt-1") == claims["run-3"]
    version = claims["run-0"][0]
    write_json_atomic(
        os.path.join(tmp_path, str(version), "metadata.json"),
        {
            "version": version,
            "run_id": "run-0",
            "source_checkpoint": "run-0/ckpt-1",
            "data_interval_end": "2026-11-20T00:00:00+00:00",
            "metrics": {"accuracy": 0.9},
        },
    )
    assert claim_version(str(tmp_path), BASE, "run-0", "run-0/ckpt-1") == (version, True)
    assert claim_version(str(tmp_path), BASE, "run-9", "run-9/ckpt-1") == (BASE + 8, False)


@pytest.mark.e2e
@pytest.mark.faults
@pytest.mark.extended
def test_an_export_killed_at_random_moments_never_shows_a_partial_version_and_the_next_publishes_once(
    concurrent_runs, fault_figures
):
    plan = concurrent_runs[0]
    model_dir, run_id = plan.model_dir, plan.context.run_id

    def unpublish() -> None:
        for m in published_metadata(model_dir):
            if m["run_id"] == run_id:
                shutil.rmtree(m["path"])

    unpublish()
    launcher = LocalLauncher(plan)
    thread = threading.Thread(target=launcher.run, args=(plan.stage("export"), collecting_logger("export")[0]))
    thread.start()
    wait_for(lambda: "export-0" in launcher.processes, 30, "the export process")
    started = time.monotonic()
    thread.join()
    duration = time.monotonic() - started  # what the kills land in
    others = [m.version for m in registry.versions(model_dir) if m.metadata.run_id != run_id]
    for trial in range(EXPORT_KILLS):
        unpublish()
        launcher, failure = LocalLauncher(plan), []

        def export(launcher: LocalLauncher, failure: list[StageFailed]) -> None:
            try:
                launcher.run(plan.stage("export"), collecting_logger("export_killed")[0])
            except StageFailed as exc:
                failure.append(exc)

        thread = threading.Thread(target=export, args=(launcher, failure))
        thread.start()
        wait_for(lambda launcher=launcher: "export-0" in launcher.processes, 30, "the export process")
        delay = random.Random(trial).uniform(0, duration)
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):  # it may have finished
            os.kill(launcher.processes["export-0"].pid, signal.SIGKILL)
        thread.join(60)
        killed = bool(failure) and failure[0].returncode == -signal.SIGKILL
        after_kill = visible_versions(model_dir)  # complete versions only, each once
        mine = [m.version for m in registry.versions(model_dir) if m.metadata.run_id == run_id]
        assert len(mine) <= 1 and [v for v in after_kill if v not in mine] == others

        started = time.monotonic()
        _, lines = run(plan, "export")
        recovered_after = time.monotonic() - started
        version = read_json(plan.layout.result("export"))["version"]
        assert [m.version for m in registry.versions(model_dir) if m.metadata.run_id == run_id] == [version]
        assert mine in ([], [version]) and (not mine) == any(line.startswith("[export-0] exported ") for line in lines)
        _, again = run(plan, "export")
        assert any("already holds this run's export; nothing to do" in line for line in again)
        assert visible_versions(model_dir) == sorted([*others, version]) and leftovers(model_dir) == []
        fault_figures(
            "4 export killed",
            "local",
            killed=killed,
            killed_at_seconds=round(delay, 2),
            killed_after_publishing=bool(mine),
            partial_version_visible=False,
            published_once=True,
            seconds_to_export_again=round(recovered_after, 2),
        )
