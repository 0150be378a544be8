"""No prune under a reader (issue 37), without TensorFlow: the model directory's lock and the warm-start parent's
reader markers across two real processes. A real warm start against a real export's prune:
tests/trainer/test_prune_under_reader.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.contract.test_withdraw import publish
from tfdist.contract import registry

HOLDER = """
import sys
from tfdist.contract import registry
lock, reader = registry.locked(sys.argv[1]), None
for line in sys.stdin:
    word, *args = line.split()
    if word == "lock":
        lock.__enter__()
    elif word == "hold":
        reader = registry.Reader(sys.argv[1], int(args[0]), "run-holding")
    elif word == "unlock":
        lock.__exit__(None, None, None)
    elif word == "release":
        reader.release()
    print("done", word, flush=True)
"""
"""Another process: takes the model directory's lock, holds a version, unlocks, releases, as told on stdin."""


class Holder:
    def __init__(self, model_dir: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, model_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def tell(self, *words: str) -> None:
        for word in words:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline() == f"done {word.split()[0]}\n"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def model_dir(tmp_path) -> str:
    model_dir = str(tmp_path / "digits")
    for version in (1, 2, 3):
        publish(model_dir, version)
    return model_dir


@pytest.fixture
def holder(model_dir):
    holder = Holder(model_dir)
    yield holder
    holder.close()


def published(model_dir: str) -> list[int]:
    return [m["version"] for m in registry.versions(model_dir)]


def test_a_version_another_process_holds_is_not_pruned_until_it_is_released(model_dir, holder):
    holder.tell("lock", "hold 1", "unlock")
    assert registry.prune(model_dir, 1, set()) == [2]
    assert published(model_dir) == [1, 3]
    holder.tell("release")
    assert registry.prune(model_dir, 1, set()) == [1]
    assert published(model_dir) == [3] and os.listdir(os.path.join(model_dir, registry.READERS_DIR)) == []


def test_a_dead_processs_marker_holds_nothing_and_the_next_prune_deletes_it(model_dir, holder):
    holder.tell("lock", "hold 1", "unlock")
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait()
    assert len(os.listdir(os.path.join(model_dir, registry.READERS_DIR))) == 1  # never released
    assert registry.prune(model_dir, 1, set()) == [1, 2]
    assert os.listdir(os.path.join(model_dir, registry.READERS_DIR)) == []


def test_a_prune_waits_while_another_process_chooses_and_then_spares_its_choice(model_dir, holder):
    holder.tell("lock")
    deleted: list[int] = []
    prune = threading.Thread(target=lambda: deleted.extend(registry.prune(model_dir, 1, set())))
    prune.start()
    prune.join(0.5)
    assert prune.is_alive() and published(model_dir) == [1, 2, 3]  # blocked on the lock
    holder.tell("hold 1", "unlock")
    prune.join(10)
    assert deleted == [2] and published(model_dir) == [1, 3]


def test_the_baseline_an_evaluation_scores_is_held_until_it_is_done(model_dir):
    """evaluate reads its baseline through ``held_baseline``: a prune meanwhile spares it."""
    with registry.held_baseline(model_dir, "2026-11-02T00:00:00+00:00", "run-evaluating") as baseline:
        assert baseline["version"] == 2 and registry.held(model_dir) == {2}
        assert registry.prune(model_dir, 1, set()) == [1]
    assert registry.held(model_dir) == set()
    assert registry.prune(model_dir, 1, set()) == [2]
    nothing_yet = os.path.join(os.path.dirname(model_dir), "unpublished")
    with registry.held_baseline(nothing_yet, "2026-11-02T00:00:00+00:00", "run-evaluating") as baseline:
        assert baseline is None
    assert not os.path.exists(nothing_yet)  # a run that publishes nothing leaves no model directory
