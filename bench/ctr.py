"""A synthetic CTR workload on large embedding tables (``make bench``, issue 38): per distribution mode and table
size, the train stage's examples/s (2 workers, through the local launcher), the bytes its processes send each other
per step and the peak RSS of each training process; the tax against a hand-written parameter-server script with the
same sharded tables and sparse optimizer (``bench/handwritten.py sharded_ps``); the step time's growth from the
smallest table to the largest with the sparse optimizer, and with the Keras optimizer for contrast.

The rows: 26 categorical features (int64 ids drawn Zipf-like from an id space of the table's size, hashed into
``hash_buckets`` = that size, EMBEDDING_DIM wide), NUMERIC numeric features, and a binary label drawn from a planted
signal on a numeric feature and three categorical features' values; prepared by the prepare_data stage. Only
BIG_TABLES of the 26 tables take the table size (the others SMALL_TABLE rows at most), as in Criteo's data, where a
few features hold millions of values: the largest configuration then fits this machine (see ``table_gib``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import statistics
import sys
import threading
import time

import numpy as np
import psutil

from tests.support.logs import collecting_logger
from tests.support.plans import plan_for, run
from tests.support.specs import DAY, make_spec
from tfdist.contract.layout import MANIFEST
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.launchers.processes import Process, local_processes
from tfdist.spec import SpecError, load_spec
from tfdist.spec.sizing import EMBEDDING_BYTES_PER_VALUE
from tfdist.trainer.train import STEPS_PER_CALL

CATEGORICAL = 26
BIG_TABLES = 4
SMALL_TABLE = 10_000
NUMERIC = 4
EMBEDDING_DIM = 16
GLOBAL_BATCH = 512
WORKERS = 2
SPARSE_OPTIMIZER = "lazy_adam"
MODEL = {"family": "mlp", "hidden_units": [128, 64], "learning_rate": 0.001, "dropout": 0.1}
MODES = {
    "parameter_server": {"strategy": "parameter_server", "num_ps": 2},
    "hybrid": {"strategy": "hybrid", "num_ps": 2},
    "multi_worker_mirrored": {},
    "horovod": {"backend": "mpi"},
}
ALL_REDUCE = ("multi_worker_mirrored", "horovod")
UNSPLIT = {**MODES["parameter_server"], "parameter_server": {"max_shards": 1}}
"""The Keras optimizer's contrast: tables split over the ps tasks need a sparse optimizer, so each stays whole on a
ps."""
MPI_OVER_TCP = ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
"""Horovod's ranks on one host talk through shared memory, which no counter sees: its bytes are counted in a run of
their own with MPI's TCP transport on the loopback, what would cross a network between hosts."""
TRAIN_MODULE = "tfdist.trainer.train"


def table_sizes(rows: int) -> list[int]:
    """The rows of each of the 26 tables at table size ``rows``."""
    return [rows if k < BIG_TABLES else min(rows, SMALL_TABLE) for k in range(CATEGORICAL)]


def table_gib(rows: int) -> float:
    """GiB of the tables with Adam's two slots (a worker of an all-reduce mode holds them all, each of 2 ps half):
    4 × 4 M × 16 wide is 3.0 GiB, 2 workers 6 GiB, and the Keras optimizer's dense update of a table briefly takes a
    few times its size more."""
    return sum(table_sizes(rows)) * EMBEDDING_DIM * EMBEDDING_BYTES_PER_VALUE / 2**30


def raw_rows(rows: int, n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """(the CSV header, ``n`` rows): numeric n0.., categorical c0.. (table size ``rows``), the label ``click``."""
    rng = np.random.default_rng(seed)
    numeric = rng.normal(0, 1, (n, NUMERIC))
    ids = np.stack([zipf_ids(rng, space, n) for space in table_sizes(rows)], axis=1)
    signal = numeric[:, 0] + sum(effect(ids[:, k]) for k in (0, 1, BIG_TABLES)) - 1
    click = (rng.random(n) < 1 / (1 + np.exp(-2 * signal))).astype(np.int64)
    header = [f"n{k}" for k in range(NUMERIC)] + [f"c{k}" for k in range(CATEGORICAL)] + ["click"]
    return header, np.concatenate([numeric.round(4), ids, click[:, None]], axis=1, dtype=object)


def zipf_ids(rng, space: int, n: int) -> np.ndarray:
    """``n`` ids of ``space``: ranks drawn from a power law (exponent 1.1, few values take most rows), mapped to ids
    scattered over the space."""
    exponent = 1.1
    u = rng.random(n)
    ranks = ((space ** (1 - exponent) - 1) * u + 1) ** (1 / (1 - exponent))
    offset = int(rng.integers(space))
    return ((ranks.astype(np.int64) - 1) * 7_919 + offset) % space


def effect(ids: np.ndarray) -> np.ndarray:
    """The planted effect of a feature's value on the click: a fixed number in [-1, 1) per id."""
    return (ids * 2_654_435_761 % 1_000) / 500 - 1


def features(rows: int) -> list[dict]:
    numeric = [{"name": f"n{k}"} for k in range(NUMERIC)]
    return numeric + [
        {"name": f"c{k}", "kind": "categorical", "dtype": "int64", "hash_buckets": size, "embedding_dim": EMBEDDING_DIM}
        for k, size in enumerate(table_sizes(rows))
    ]


def sections(rows: int, epochs: int, training: dict | None = None, optimizer: str | None = SPARSE_OPTIMIZER) -> dict:
    return {
        "data": {
            "source": "{artifact_root}/raw/ctr_" + str(rows) + "/{date}/*.csv",
            "format": "csv",
            "features": features(rows),
            "label": {"name": "click", "task": "binary"},
            "num_shards": 4,
        },
        "model": {**MODEL, "embedding_optimizer": optimizer},
        "training": {
            "num_workers": WORKERS,
            "epochs": epochs,
            "global_batch_size": GLOBAL_BATCH,
            "checkpoint_every_steps": 10**6,
            **(training or {}),
        },
        "validation": {"thresholds": {"auc": {"lower": 0.5}}},
    }


def prepare(work: str, rows: int, examples: int, epochs: int):
    """The plan of a run on the prepared rows of table size ``rows``: ``examples`` raw rows written as a day's CSV
    file and prepared by the prepare_data stage."""
    plan = plan_for(work, f"ctr-data-{rows}", DAY, **sections(rows, epochs))
    (pattern,) = plan.stage("prepare_data").args.source
    os.makedirs(os.path.dirname(pattern), exist_ok=True)
    header, values = raw_rows(rows, examples)
    np.savetxt(
        os.path.join(os.path.dirname(pattern), "rows.csv"), values, "%s", ",", header=",".join(header), comments=""
    )
    run(plan, "prepare_data")
    return plan


def refused(mode: str) -> str | None:
    """Why the spec refuses the mode (``hybrid`` until it lands), else None."""
    try:
        load_spec(make_spec("/tmp", **sections(SMALL_TABLE, 1, MODES[mode])))
    except SpecError as e:
        return " ".join(line.strip() for line in str(e).splitlines()[1:])
    return None


class Watch:
    """While the block runs, every SAMPLE_SECONDS: the loopback's bytes sent, and the peak RSS (VmHWM) of every
    process under this one that runs ``module``, by its member name (chief-0, ps-1, worker-0, rank-1, ...): servers
    such as the ps and the parameter-server workers are caught too, up to their last sample."""

    SAMPLE_SECONDS = 0.1

    def __init__(self, module: str):
        self.module = module
        self.loopback: list[tuple[float, int]] = []
        self.peak_kb: dict[str, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        names: dict[int, str] = {}
        while not self._done.wait(self.SAMPLE_SECONDS):
            self.loopback.append((time.monotonic(), psutil.net_io_counters(pernic=True)["lo"].bytes_sent))
            for proc in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error, OSError):
                    if proc.pid not in names and proc.cmdline()[1:3] == ["-m", self.module]:
                        names[proc.pid] = member_name(proc.environ())
                    if proc.pid in names:
                        name = names[proc.pid]
                        self.peak_kb[name] = max(self.peak_kb.get(name, 0), peak_rss_kb(proc.pid))

    def bytes_between(self, start: float, end: float) -> float:
        times, sent = zip(*self.loopback, strict=True)
        return float(np.interp(end, times, sent) - np.interp(start, times, sent))


def member_name(env: dict[str, str]) -> str:
    """A training process's name from its environment: its TF_CONFIG task, its MPI rank, else 'single'."""
    if "TF_CONFIG" in env:
        task = json.loads(env["TF_CONFIG"])["task"]
        return f"{task['type']}-{task['index']}"
    rank = env.get("OMPI_COMM_WORLD_RANK") or env.get("HOROVOD_RANK")
    return f"rank-{rank}" if rank else "single"


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident memory (kB; 0 once it has ended)."""
    with open(f"/proc/{pid}/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)


REPORT = re.compile(r"^\[(?:chief|worker|rank)-0\] .*\bstep (\d+)/(\d+) epoch")


def bytes_per_step(lines: list[tuple[float, str]], watch: Watch) -> float | None:
    """Loopback bytes per step between the first progress report after the first step call and the last before the
    final step (the final checkpoint's save reads every table): from the reports' times and steps."""
    reports = [(t, int(m[1]), int(m[2])) for t, line in lines if (m := REPORT.search(line))]
    steady = [(t, step) for t, step, total in reports if step < total]
    window = steady if len(steady) >= 2 else [(t, step) for t, step, _ in reports]
    if len(window) < 2:
        return None
    (start, first), (end, last) = window[0], window[-1]
    return watch.bytes_between(start, end) / (last - first)


class Workload:
    """The rows of each table size prepared once; the train stage and the hand-written script run on them."""

    def __init__(self, work: str, budget):
        self.work, self.budget = work, budget
        self.prepared = {
            rows: prepare(work, rows, budget.ctr_examples, budget.ctr_epochs) for rows in budget.ctr_tables
        }
        some = next(iter(self.prepared.values()))
        examples = read_json(os.path.join(some.layout.data_dir, MANIFEST))["train"]["examples"]
        self.steps = budget.ctr_epochs * (examples // GLOBAL_BATCH)

    def plan(self, name: str, rows: int, training: dict, optimizer: str | None = SPARSE_OPTIMIZER, epochs: int = 0):
        epochs = epochs or self.budget.ctr_epochs
        plan = plan_for(self.work, name, DAY, **sections(rows, epochs, training, optimizer))
        os.symlink(self.prepared[rows].layout.data_dir, plan.layout.data_dir)
        return plan

    def ours(self, name: str, rows: int, training: dict, optimizer: str | None = SPARSE_OPTIMIZER, epochs: int = 0):
        """The train stage's examples/s, loopback bytes per step and each training process's peak RSS (MB)."""
        plan = self.plan(name, rows, training, optimizer, epochs)
        lines: list[tuple[float, str]] = []
        logger, _ = collecting_logger(name, lambda line: lines.append((time.monotonic(), line)))
        with Watch(TRAIN_MODULE) as watch:
            LocalLauncher(plan).run(plan.stage("train"), logger)
        return {
            "examples_per_sec": read_json(plan.layout.result("train"))["examples_per_sec"],
            "bytes_per_step": bytes_per_step(lines, watch),
            "peak_rss_mb": {name: kb / 1024 for name, kb in sorted(watch.peak_kb.items())},
        }

    def handwritten(self, name: str, rows: int) -> float:
        """Examples/s of the hand-written sharded parameter-server script (chief, 2 ps, 2 workers; its TF_CONFIG
        only, as the train stage's cluster has)."""
        plan = self.plan(name, rows, MODES["parameter_server"])
        command = (
            sys.executable,
            "-m",
            "bench.handwritten",
            "sharded_ps",
            *("--spec", plan.layout.spec_file, "--data", plan.layout.data_dir),
            *("--steps", str(self.steps), "--steps-per-call", str(STEPS_PER_CALL)),
        )
        stage = plan.stage("train")
        processes = [
            Process(p.name, p.role, command, {"TF_CONFIG": p.env["TF_CONFIG"]})
            for p in local_processes(stage, command=list(command))
        ]
        logger, lines = collecting_logger(name)
        LocalLauncher(plan).run_processes(stage, processes, logger)
        return next(float(m[1]) for line in lines.lines if (m := re.search(r"examples/s ([\d.]+)$", line)))


def measure(work: str, budget) -> dict:
    """Per repetition, in alternating order: every mode at every table size, the hand-written script at the largest;
    then once each: the Keras optimizer at the smallest and the largest (parameter_server, the tables unsplit, one
    epoch: its dense update of a large table is slow; with two table sizes or more), Horovod's bytes over TCP per
    table size."""
    logging.getLogger("tfdist.test").propagate = False
    skipped = {mode: why for mode in budget.ctr_modes if (why := refused(mode))}
    modes = [mode for mode in budget.ctr_modes if mode not in skipped]
    for mode, why in skipped.items():
        print(f"  ctr: {mode} skipped, the spec refuses it: {why}", flush=True)
    w = Workload(work, budget)
    smallest, largest = min(budget.ctr_tables), max(budget.ctr_tables)
    cases = [
        (f"{mode}/{rows}", lambda r, mode=mode, rows=rows: w.ours(f"ctr-{mode}-{rows}-r{r}", rows, MODES[mode]))
        for rows in budget.ctr_tables
        for mode in modes
    ]
    if "parameter_server" in modes:
        cases.append((f"handwritten/{largest}", lambda r: w.handwritten(f"ctr-handwritten-{largest}-r{r}", largest)))
    samples: dict[str, list] = {name: [] for name, _ in cases}
    for r in range(budget.ctr_repetitions):
        for name, measured in cases if r % 2 == 0 else cases[::-1]:
            samples[name].append(measured(r))
            print(f"  ctr {name}: {samples[name][-1]}", flush=True)
    for rows in (smallest, largest) if smallest != largest else ():  # a contrast of an order of magnitude: once
        samples[f"keras/{rows}"] = [w.ours(f"ctr-keras-{rows}", rows, UNSPLIT, None, 1)]
        print(f"  ctr keras/{rows}: {samples[f'keras/{rows}'][0]}", flush=True)
    if "horovod" in modes:
        for rows in budget.ctr_tables:
            training = {**MODES["horovod"], "mpi": {"extra_args": MPI_OVER_TCP}}
            samples[f"horovod_tcp/{rows}"] = [w.ours(f"ctr-horovod-tcp-{rows}", rows, training)]
            print(f"  ctr horovod over TCP/{rows}: {samples[f'horovod_tcp/{rows}'][0]}", flush=True)
    return {"samples": samples, "steps": w.steps, "modes": modes, "skipped": skipped, "tables": budget.ctr_tables}


def rates(samples: dict, name: str) -> list[float]:
    return [s if isinstance(s, float) else s["examples_per_sec"] for s in samples[name]]


def faster(samples: dict, modes: list[str], rows: int) -> list[float]:
    """Per repetition, the higher examples/s of ``modes`` at table size ``rows``."""
    return [max(each) for each in zip(*(rates(samples, f"{mode}/{rows}") for mode in modes), strict=True)]


def groups(modes: list[str]) -> tuple[list[str], list[str]]:
    """(the modes with parameter servers, the all-reduce modes) of those measured."""
    return [m for m in modes if m not in ALL_REDUCE], [m for m in modes if m in ALL_REDUCE]


def rows(results: dict, ratio_row) -> list[dict]:
    s, tables = results["samples"], results["tables"]
    smallest, largest = min(tables), max(tables)
    with_ps, all_reduce = groups(results["modes"])
    out = []
    for size in tables if with_ps and all_reduce else ():
        goal = size == largest
        out.append(
            ratio_row(
                f"CTR examples/s, {size:,}-row tables: the faster of {', '.join(with_ps)} / the faster of "
                f"{', '.join(all_reduce)} (2 workers)",
                faster(s, with_ps, size),
                faster(s, all_reduce, size),
                "≥ 1.5" if goal else "",
                (lambda m: m >= 1.5) if goal else (lambda m: None),
            )
        )
    if "parameter_server" not in results["modes"]:
        return out
    out.append(
        ratio_row(
            f"CTR plugin tax, parameter_server (2 ps, 2 workers, {largest:,}-row tables): train stage / hand-written "
            "script with the same sharded tables and lazy Adam",
            rates(s, f"parameter_server/{largest}"),
            rates(s, f"handwritten/{largest}"),
            "≥ 0.95",
            lambda m: m >= 0.95,
        )
    )
    scaling = ((SPARSE_OPTIMIZER, "parameter_server", True), ("Keras Adam", "keras", False))
    for optimizer, name, goal in scaling if smallest != largest else ():
        out.append(
            ratio_row(
                f"CTR step time, parameter_server, {largest:,}-row tables / {smallest:,} ({optimizer})",
                rates(s, f"{name}/{smallest}"),
                rates(s, f"{name}/{largest}"),
                "≤ 1.2" if goal else "",
                (lambda m: m <= 1.2) if goal else (lambda m: None),
            )
        )
    return out


def absolutes(results: dict) -> list[tuple[str, str]]:
    s, tables = results["samples"], results["tables"]
    out = [(f"CTR {mode}", f"skipped: {why}") for mode, why in results["skipped"].items()]
    for size in tables:
        out.append((f"CTR tables at {size:,} rows", f"{table_gib(size):.2f} GiB with Adam's slots"))
        for mode in results["modes"]:
            figures = median_figures(s, mode, size)
            rss = ", ".join(f"{name} {mb:,.0f}" for name, mb in figures["peak_rss_mb"].items())
            out.append(
                (
                    f"CTR {mode}, {size:,}-row tables",
                    f"{figures['examples_per_sec']:,.0f} examples/s, {figures['step_ms']:.1f} ms per step, "
                    f"{figures['bytes_per_step'] / 2**10:,.0f} KiB sent per step"
                    f"{' (MPI over TCP)' if mode == 'horovod' else ''}; peak RSS (MB) {rss}",
                )
            )
    largest, smallest = max(tables), min(tables)
    if f"handwritten/{largest}" in s:
        out.append(
            (f"CTR hand-written sharded parameter server, {largest:,}-row tables", examples(s, "handwritten", largest))
        )
    for size in (smallest, largest) if smallest != largest else ():
        out.append((f"CTR parameter_server with the Keras optimizer, {size:,}-row tables", examples(s, "keras", size)))
    with_ps, all_reduce = groups(results["modes"])
    if with_ps and all_reduce:
        best = [
            max((median_figures(s, m, largest) for m in group), key=lambda f: f["examples_per_sec"])
            for group in (with_ps, all_reduce)
        ]
        out.append((f"CTR bandwidth for the goal at {largest:,}-row tables", goal_bandwidth(*best)))
    return out


def examples(samples: dict, name: str, size: int) -> str:
    values = rates(samples, f"{name}/{size}")
    return f"{statistics.median(values):,.0f} examples/s"


def median_figures(samples: dict, mode: str, size: int) -> dict:
    """A mode's median examples/s and step time, its bytes per step (Horovod's over TCP) and the peak RSS of each of
    its processes (the highest of the repetitions)."""
    runs = samples[f"{mode}/{size}"]
    counted = samples.get(f"horovod_tcp/{size}", runs) if mode == "horovod" else runs
    rate = statistics.median(r["examples_per_sec"] for r in runs)
    sent = [r["bytes_per_step"] for r in counted if r["bytes_per_step"] is not None]
    members = sorted({name for r in runs for name in r["peak_rss_mb"]})
    return {
        "mode": mode,
        "examples_per_sec": rate,
        "step_ms": 1000 * GLOBAL_BATCH / rate,
        "bytes_per_step": statistics.median(sent) if sent else float("nan"),
        "peak_rss_mb": {name: max(r["peak_rss_mb"].get(name, 0) for r in runs) for name in members},
    }


def goal_bandwidth(ps: dict, all_reduce: dict, goal: float = 1.5) -> str:
    """Where the parameter-server mode reaches ``goal`` × the all-reduce mode's examples/s if every byte a step
    sends crossed one link of bandwidth B (a step then takes its time here plus bytes / B; the processes' links
    shared, so conservative): B from t_a + b_a / B = goal × (t_p + b_p / B)."""
    t_p, t_a = ps["step_ms"] / 1000, all_reduce["step_ms"] / 1000
    b_p, b_a = ps["bytes_per_step"], all_reduce["bytes_per_step"]
    bytes_gain, time_gap = b_a - goal * b_p, goal * t_p - t_a
    names = f"{ps['mode']} against {all_reduce['mode']}"
    if time_gap <= 0:
        if bytes_gain >= 0:
            return f"{names}: holds here and on any network"
        return f"{names}: holds here and on links faster than {gbit(-bytes_gain / -time_gap)}"
    if bytes_gain <= 0:
        return (
            f"{names}: on no network (slower here, and its {b_p / 2**10:,.0f} KiB per step are over 1/{goal} of "
            f"{b_a / 2**10:,.0f})"
        )
    return f"{names}: on links slower than {gbit(bytes_gain / time_gap)}"


def gbit(bytes_per_second: float) -> str:
    return f"{bytes_per_second * 8 / 1e9:.2f} Gbit/s"
