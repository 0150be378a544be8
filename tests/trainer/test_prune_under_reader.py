"""No prune under a reader (issue 37): a warm start's parent survives another run's export pruning with
``export.keep_versions: 1`` while the warm-starting train stage runs, and is pruned once it has ended. Real train,
evaluate and export stages through the local launcher; the lock alone: tests/publishing/test_prune_readers.py."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading

import pytest

from tests.support.logs import collecting_logger
from tests.support.plans import prepared_plan, run
from tests.support.processes import wait_for
from tests.support.specs import DAY
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers import StageFailed
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.publishing import registry

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

GATE = {"thresholds": {"accuracy": {"lower": 0.5}}}
MODEL = "prune_readers"


def plan(root: str, run_id: str, day: dt.date, keep: int | None = None, **training):
    export = {"model_name": MODEL, **({"keep_versions": keep} if keep else {})}
    return prepared_plan(
        root, run_id, day, training={"num_workers": 1, "epochs": 3, **training}, validation=GATE, export=export
    )


def markers(model_dir: str) -> list[dict]:
    readers = os.path.join(model_dir, registry.READERS_DIR)
    return [read_json(os.path.join(readers, name)) for name in os.listdir(readers)] if os.path.isdir(readers) else []


def test_a_warm_starts_parent_survives_another_runs_prune_until_its_training_ends(digits_root):
    day1 = DAY - dt.timedelta(days=1)
    later = plan(digits_root, "prune_later", DAY, keep=1)  # evaluated before anything is published: no baseline
    run(later, "train")
    run(later, "evaluate")
    first = plan(digits_root, "prune_first", day1)
    for task_id in ("train", "evaluate", "export"):
        run(first, task_id)
    model_dir = first.model_dir
    (parent,) = [m.version for m in registry.versions(model_dir)]

    short = plan(digits_root, "prune_short", day1, warm_start="baseline", epochs=1)
    run(short, "train")  # a warm start that ended: it holds nothing
    assert read_json(short.layout.warm_start_file)["parent"]["version"] == parent and markers(model_dir) == []

    reader = plan(digits_root, "prune_reader", day1, warm_start="baseline", epochs=500)
    launcher = LocalLauncher(reader)
    ended: list[Exception] = []
    training = threading.Thread(
        target=lambda: ended.extend(_failure(launcher.run, reader.stage("train"), collecting_logger("reader")[0]))
    )
    training.start()
    try:
        held = wait_for(lambda: markers(model_dir), 120, "the reader's marker")
        assert [(m["version"], m["run_id"]) for m in held] == [(parent, "prune_reader")]
        _, lines = run(later, "export")  # publishes the newest version and prunes to 1
        assert not any("deleted version" in line for line in lines), lines
        assert [m.version for m in registry.versions(model_dir)] == [
            parent,
            read_json(later.layout.result("export"))["version"],
        ]
        assert training.is_alive() and markers(model_dir) == held  # it was training throughout
    finally:
        for proc in launcher.processes.values():
            proc.send_signal(signal.SIGKILL)  # the run ends (a dead process's marker holds nothing)
        training.join()
    assert ended and isinstance(ended[0], StageFailed)
    assert registry.prune(model_dir, 1, set()) == [parent] and markers(model_dir) == []


def _failure(call, *args) -> list[Exception]:
    try:
        call(*args)
    except Exception as exc:
        return [exc]
    return []
