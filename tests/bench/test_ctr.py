"""The CTR benchmark's own arithmetic (bench/ctr.py): its rows carry the planted signal, bytes per step come from the
steady window only, and the bandwidth at which the parameter-server goal holds."""

from __future__ import annotations

import numpy as np

from bench import ctr


def test_the_rows_carry_the_planted_signal_on_ids_of_the_table_size():
    header, rows = ctr.raw_rows(1_000_000, 20_000)
    ids = rows[:, ctr.NUMERIC : ctr.NUMERIC + ctr.CATEGORICAL].astype(np.int64)
    assert ids[:, 0].max() > ctr.SMALL_TABLE and ids[:, ctr.BIG_TABLES].max() < ctr.SMALL_TABLE
    assert len(np.unique(ids[:, 0])) < len(ids) / 2  # Zipf-like: a few values take most rows
    click = rows[:, -1].astype(int)
    high = ctr.effect(ids[:, 0]) > 0.5
    assert click[high].mean() > click[~high].mean() + 0.1
    assert header[-1] == "click" and len(header) == ctr.NUMERIC + ctr.CATEGORICAL + 1


def test_bytes_per_step_count_the_steady_reports_not_the_final_checkpoint():
    watch = ctr.Watch(ctr.TRAIN_MODULE)
    watch.loopback = [(0.0, 0), (10.0, 1000), (20.0, 2000), (21.0, 10**9)]  # the final save reads every table
    lines = [
        (5.0, "[chief-0] chief-0: first 20 steps done in 5.00s (tracing included)"),
        (5.0, "[chief-0] chief-0: step 20/200 epoch 0.10 loss 0.5"),
        (15.0, "[chief-0] chief-0: step 120/200 epoch 0.60 loss 0.4"),
        (15.0, "[worker-1] worker-1: step 60/200 epoch 0.30 loss 0.4"),
        (21.0, "[chief-0] chief-0: step 200/200 epoch 1.00 loss 0.3"),
    ]
    assert ctr.bytes_per_step(lines, watch) == 1000 / 100


def test_the_bandwidth_at_which_the_parameter_server_goal_holds():
    def mode(name, step_ms, sent):
        return {"mode": name, "step_ms": step_ms, "bytes_per_step": sent}

    # as fast here (10 ms a step), a tenth of the bytes: at 1.7 GB/s steps take 10.6 and 15.9 ms (1.5×)
    ps, all_reduce = mode("parameter_server", 10, 1e6), mode("horovod", 10, 10e6)
    assert ctr.goal_bandwidth(ps, all_reduce) == "parameter_server against horovod: on links slower than 13.60 Gbit/s"
    assert "on no network" in ctr.goal_bandwidth(mode("ps", 10, 10e6), mode("ar", 10, 1e6))
    assert "holds here and on any network" in ctr.goal_bandwidth(mode("ps", 5, 1e6), mode("ar", 10, 10e6))
    assert "holds here and on links faster than" in ctr.goal_bandwidth(mode("ps", 5, 10e6), mode("ar", 10, 1e6))
