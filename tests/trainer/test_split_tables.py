"""A table too large for one parameter server: a 2-million-row × 32 table (256 MB of float32, 768 MB with lazy Adam's
slots) trains split over 2 ps tasks, none of the processes ever holding it whole; its checkpoint warm-starts a run
with 3 ps tasks, with a split vocabulary table whose tokens changed matched by token; evaluate and export restore
the tables whole in one process, and the published SavedModel serves raw rows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest

from tests.support.logs import collecting_logger
from tests.support.plans import plan_for, run
from tests.support.specs import DAY
from tests.trainer import prepared_tables as tabular
from tests.trainer.test_tabular_training import MLP
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers.local import LocalLauncher

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

ROWS, WIDTH = 2_000_000, 32
TABLE_MB = ROWS * WIDTH * 4 / 2**20
SPLIT = {  # device: 2M hashed ids; country: a vocabulary of some 500 tokens, 128 wide (256 kB: split at 64 kB)
    "device": {"hash_buckets": ROWS, "embedding_dim": WIDTH},
    "country": {"vocabulary": {"max_tokens": 1000, "oov_buckets": 2}, "embedding_dim": 128},
}
FEATURES = [dict(f, **SPLIT.get(f["name"], {})) for f in tabular.FEATURES]
COUNTRIES = [f"c{i}" for i in range(700)]
SERVE = """
import json, sys
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
rows = {"age": [31.0, float("nan")], "scores": [[0.1, 1.0], [2.0, -1.0]], "country": ["de", "atlantis"],
        "device": ["ios", "fridge"], "store": [101, 999], "recent": [["item1", "item2"], ["", ""]]}
out = serve(**{k: tf.constant(v, tf.int64 if k == "store" else None) for k, v in rows.items()})
print(json.dumps(out["probability"].numpy().ravel().tolist()))
"""


def sections(num_ps: int, table: str, warm_start: str = "none") -> dict:
    training = {"strategy": "parameter_server", "num_ps": num_ps, "num_workers": 2, "epochs": 1}
    training["parameter_server"] = {"shard_min_bytes": 2**16}
    return {
        "data": tabular.data_section("binary", FEATURES, table),
        "model": {**MLP, "embedding_optimizer": "lazy_adam"},
        "training": {**training, "warm_start": warm_start, "checkpoint_every_steps": 20, "summary_every_steps": 20},
        "validation": tabular.VALIDATION["binary"],
    }


def trained_with_peaks(plan) -> tuple[dict[str, float], list[str]]:
    """Run the train stage: each process's peak resident memory (MiB), sampled while it runs, and the log."""
    logger, lines = collecting_logger("train")
    launcher, peaks, done = LocalLauncher(plan), {}, threading.Event()

    def sample() -> None:
        while not done.is_set():
            for name, proc in list(launcher.processes.items()):
                try:
                    with open(f"/proc/{proc.pid}/status") as f:
                        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
                    peaks[name] = max(peaks.get(name, 0), kb / 1024)
                except (OSError, StopIteration):
                    pass
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        launcher.run(plan.stage("train"), logger)
    finally:
        done.set()
        sampler.join()
    return peaks, lines.lines


def assert_split(trained: tuple[dict[str, float], list[str]], num_ps: int) -> None:
    """Both tables were split, over every ps task; each ps held its share of the large table and its two slots, the
    chief and the workers none of it."""
    peaks, lines = trained
    every, log = ",".join(str(i) for i in range(num_ps)), "".join(lines)
    assert f"device_embedding {num_ps} shards on ps {every}" in log, [line for line in lines if "split" in line]
    assert re.search(r"country_embedding [23] shards on ps", log)
    servers = [peaks[f"ps-{i}"] for i in range(num_ps)]
    assert min(servers) > 3 * TABLE_MB / num_ps, peaks
    for other in ("chief-0", "worker-0", "worker-1"):
        assert peaks[other] < min(servers) - TABLE_MB / num_ps, peaks


def published(plan) -> dict:
    run(plan, "evaluate")
    run(plan, "export")
    return read_json(plan.layout.result("export"))


def test_a_2m_row_table_trains_split_over_parameter_servers_and_warm_starts_into_more(tmp_path):
    root = str(tmp_path)
    plan = plan_for(root, "two_ps", DAY, **sections(num_ps=2, table="parent"))
    tabular.prepare(plan, 3000, countries=COUNTRIES[:600])
    assert_split(trained_with_peaks(plan), 2)
    parent = published(plan)

    child = plan_for(root, "three_ps", DAY, **sections(num_ps=3, table="child", warm_start="baseline"))
    tabular.prepare(child, 3000, countries=COUNTRIES[100:])
    assert_split(trained_with_peaks(child), 3)
    record = read_json(child.layout.warm_start_file)
    assert record["parent"]["version"] == parent["version"] and record["restored"] == "model and optimizer", record
    countries = record["vocabularies"]["country"]
    assert countries["carried"] > 100 and countries["new"] > 0 and countries["dropped"] > 0, countries

    version = published(child)
    served = subprocess.run(
        [sys.executable, "-c", SERVE, version["path"]], capture_output=True, text=True, check=True, timeout=300
    )
    probabilities = json.loads(served.stdout.splitlines()[-1])
    assert len(probabilities) == 2 and all(0 < p < 1 for p in probabilities), probabilities
