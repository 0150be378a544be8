"""``make bench``: what the plugin costs and where it stands against the limit on this machine.

Every figure is a ratio of two things measured side by side in the same run, each repetition in the
opposite order of the one before; the table gives the median and the spread (min–max). Every section runs in one
process, and writes ``latest.md``, ``latest.json`` and ``throughput.png`` to ``--out``, their header giving the date
and how long the run took; ``--sections`` measures only some (SECTIONS), written beside as ``<sections>.md`` and
``<sections>.json`` (``results_name``), never over a full run's. As each section ends, the sections so far are
written as ``<name>.partial.*`` (``PARTIAL``), so a stopped run keeps what it measured. Not a test: CI runs only the
tiny budget, to check the suite still runs."""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import logging
import os
import re
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import categorical, ctr, follow, object_store, parse, serving, shards, warm_start
from tfdist.contract.launch import HOROVOD_SHARED_CORES_ENV
from tfdist.contract.layout import MANIFEST, record_run
from tfdist.operators.demo import airflow_dags_test, write_digits_partitions
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.launchers.processes import Process, local_processes
from tfdist.operators.plan import RunContext, StagePlan, build_plan
from tfdist.spec import load_spec
from tfdist.trainer.train import STEPS_PER_CALL  # the yardsticks run as many steps per tf.function call

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY = dt.date(2026, 11, 20)
MODES = {
    "mirrored": {"backend": "tf"},
    "parameter_server": {"backend": "tf", "strategy": "parameter_server", "num_ps": 1},
    "horovod": {"backend": "mpi"},
}
SYNC_MODES = ("mirrored", "horovod")  # all-reduce modes: bench/collectives.py measures their sync alone


@dataclass(frozen=True)
class Budget:
    repetitions: int
    epochs: int
    worker_counts: tuple[int, ...]
    shard_sizes: tuple[int, ...]
    parse_repetitions: int
    modes: tuple[str, ...]
    """Distribution modes whose training is measured (the tiny budget leaves out the 4-process parameter-server
    cluster, the most expensive to start)."""
    sparse_tables: tuple[int, ...]
    """Rows of the embedding tables whose sparse and densified sync bench/sparse_sync.py measures (32 wide, 32
    lookups per replica)."""
    airflow_run: bool
    """Measure the Airflow task process's memory in one ``airflow dags test`` run (tests/live/test_demo.py already
    runs that path, so the tiny budget skips it)."""
    prepare_base_mb: float
    """prepare_data at scale: the 1× input (PREPARE_FACTORS times it: memory; 8×: one vs two writers)."""
    follow_pods: tuple[int, ...]
    """Following a Kubernetes stage (bench/follow.py): its pod counts."""
    follow_seconds: float
    """... and the steady window at each."""
    warm_start_epochs: int
    """Warm start (bench/warm_start.py): the epochs of each run on a day's partition (19 steps each),"""
    summary_epochs: int
    """... and of each throughput run with and without summaries,"""
    summary_best_of: int
    """... each figure the best of this many runs."""
    serving_calls: int
    """Serving latency (bench/serving.py): calls of each model per batch size."""
    ctr_examples: int
    """The CTR workload (bench/ctr.py): raw rows, ``ctr_epochs`` epochs of them per run,"""
    ctr_epochs: int
    ctr_tables: tuple[int, ...]
    """... its table sizes (rows of its large tables; the step-time scaling and the Keras optimizer's contrast need
    two),"""
    ctr_modes: tuple[str, ...]
    """... its distribution modes (the goal's comparison needs one with parameter servers and one all-reduce; the full
    budget leaves out multi_worker_mirrored, the slower all-reduce here, whose workers hold 7.7 GB at 4 M rows),"""
    ctr_repetitions: int
    """... and its repetitions (its runs at the largest tables are the bench's longest)."""
    store_records: int
    """Object storage (bench/object_store.py): the records of the shards read from the S3 server,"""
    store_checkpoint_mb: int
    """... the size of the checkpoint uploaded,"""
    store_epochs: int
    """... and the epochs of each run of the training throughput with checkpoints uploaded."""


PREPARE_FACTORS = (1, 8, 64)


BUDGETS = {
    "tiny": Budget(
        repetitions=1,
        epochs=2,
        worker_counts=(2,),
        shard_sizes=(2_000, 4_000),
        parse_repetitions=1,
        modes=("mirrored", "horovod"),
        sparse_tables=(1_000,),
        airflow_run=False,
        prepare_base_mb=0.5,
        follow_pods=(2, 8),
        follow_seconds=5,
        warm_start_epochs=3,
        summary_epochs=5,
        summary_best_of=1,
        serving_calls=40,
        ctr_examples=6_000,
        ctr_epochs=2,
        ctr_tables=(1_000,),
        ctr_modes=("parameter_server",),
        ctr_repetitions=1,
        store_records=20_000,
        store_checkpoint_mb=4,
        store_epochs=8,
    ),
    "full": Budget(
        repetitions=3,
        epochs=8,
        worker_counts=(2,),
        shard_sizes=(20_000, 200_000),
        parse_repetitions=5,
        modes=tuple(MODES),
        sparse_tables=(200_000,),
        airflow_run=True,
        prepare_base_mb=25,
        follow_pods=(2, 8, 32, 128),
        follow_seconds=20,
        warm_start_epochs=20,
        summary_epochs=100,
        summary_best_of=2,
        serving_calls=1000,
        ctr_examples=60_000,
        ctr_epochs=2,
        ctr_tables=(10_000, 4_000_000),
        ctr_modes=("parameter_server", "hybrid", "horovod"),
        ctr_repetitions=2,
        store_records=200_000,
        store_checkpoint_mb=64,
        store_epochs=40,
    ),
}


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def alternating(cases: list, repetition: int) -> list:
    return cases if repetition % 2 == 0 else cases[::-1]


class Lines(logging.Handler):
    """Each relayed output line with the time it arrived."""

    def __init__(self):
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record):
        self.lines.append((time.monotonic(), record.getMessage()))


def run_stage(plan, stage: StagePlan, processes: list[Process] | None = None) -> tuple[float, list[tuple[float, str]]]:
    """(the time the launcher started, the stage's output lines); ``processes``: others than the stage's own,
    started as the local launcher starts the stage's."""
    log = logging.getLogger(f"tfdist.bench.{stage.task_id}")
    log.setLevel(logging.INFO)
    log.propagate = False
    log.handlers = [Lines()]
    started = time.monotonic()
    launcher = LocalLauncher(plan)
    launcher.run(stage, log) if processes is None else launcher.run_processes(stage, processes, log)
    return started, log.handlers[0].lines


class Training:
    """The example pipeline's train stage (and its yardsticks) on shards prepared once by the prepare stage."""

    def __init__(self, work: str, budget: Budget):
        self.work, self.budget = work, budget
        self.spec = copy.deepcopy(runpy.run_path(os.path.join(REPO, "dags", "digits_nightly.py"))["SPEC"])
        self.spec.update(artifact_root=work)
        self.spec["data"]["window"] = 3
        self.spec["training"].update(epochs=budget.epochs, checkpoint_every_steps=10**6)
        write_digits_partitions(os.path.join(work, "raw", "digits"), DAY, 3)
        prepared = self.plan("prepare", {})
        run_stage(prepared, prepared.stage("prepare_data"))
        self.data, self.spec_file = prepared.layout.data_dir, prepared.layout.spec_file
        with open(os.path.join(self.data, MANIFEST)) as f:
            examples = json.load(f)["train"]["examples"]
        self.steps = budget.epochs * (examples // self.spec["training"]["global_batch_size"])

    def plan(self, run_id: str, training: dict):
        spec = copy.deepcopy(self.spec)
        spec["training"].update(training)
        spec = load_spec(spec)
        start = dt.datetime.combine(DAY, dt.time(), dt.UTC)
        plan = build_plan(spec, RunContext(spec.name, run_id, start, start + dt.timedelta(days=1)))
        record_run(plan.layout, spec.to_json_dict(), plan.run_record())
        return plan

    def ours(self, run_id: str, mode: str, workers: int) -> dict:
        plan = self.plan(run_id, {**MODES[mode], "num_workers": workers})
        os.symlink(self.data, plan.layout.data_dir)
        started, lines = run_stage(plan, plan.stage("train"))
        with open(plan.layout.result("train")) as f:
            rate = json.load(f)["examples_per_sec"]
        first_step = min(t for t, line in lines if re.search(r": first \d+ steps done", line))
        peaks = [float(m[1]) for _, line in lines if (m := re.search(r"peak RSS (\d+) MB", line))]
        return {"examples_per_sec": rate, "first_step_seconds": first_step - started, "peak_rss_mb": max(peaks)}

    def sync_ms(self, mode: str) -> float:
        """Milliseconds per step of 2 processes doing only the gradient sync and update (bench/collectives.py),
        launched as the train stage launches them."""
        plan = self.plan(f"sync-{mode}", {**MODES[mode], "num_workers": 2})
        stage = plan.stage("train")
        command = [
            sys.executable,
            "-m",
            "bench.collectives",
            mode,
            "--spec",
            self.spec_file,
            "--data",
            self.data,
            "--steps",
            str(self.steps),
        ]
        _, lines = run_stage(plan, stage, local_processes(stage, command=command))
        return next(float(m[1]) for _, line in lines if (m := re.search(r"sync_ms ([\d.]+)$", line)))

    def sparse_sync_ms(self, mode: str, rows: int, dense: bool) -> float:
        """Milliseconds per step of an embedding table's lookup, gradient sync and update (bench/sparse_sync.py),
        2 workers launched as the train stage launches them."""
        plan = self.plan(f"sparse-{mode}-{rows}-{dense}", {**MODES[mode], "num_workers": 2})
        stage = plan.stage("train")
        command = [sys.executable, "-m", "bench.sparse_sync", mode, "--rows", str(rows), "--dim", "32"]
        command += ["--lookups", "32", "--steps", str(min(self.steps, 200)), *(["--dense"] if dense else [])]
        _, lines = run_stage(plan, stage, local_processes(stage, command=command))
        return next(float(m[1]) for _, line in lines if (m := re.search(r"step_ms ([\d.]+)$", line)))

    def handwritten(self, mode: str, workers: int) -> float:
        """Examples/s of bench/handwritten.py: plain processes, neither pinned nor given a thread budget."""
        command = (
            sys.executable,
            "-m",
            "bench.handwritten",
            mode,
            "--spec",
            self.spec_file,
            "--data",
            self.data,
            "--steps",
            str(self.steps),
            "--steps-per-call",
            str(STEPS_PER_CALL),
        )
        training = {"single": {}, "horovod": MODES["horovod"], "ps": MODES["parameter_server"]}.get(mode, {})
        plan = self.plan(f"handwritten-{mode}-{workers}", {**training, "num_workers": workers})
        stage = plan.stage("train")
        if mode == "single":
            processes = [Process("single-0", "single", command)]
        elif mode == "horovod":  # Horovod's documented tuning for one host: a short cycle, ranks yield when idle
            horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
            argv = (horovodrun, "-np", str(workers), "-H", f"localhost:{workers}", *command)
            processes = [Process("horovodrun-0", "horovodrun", argv, HOROVOD_SHARED_CORES_ENV, rank_tagged=True)]
        else:  # the cluster's TF_CONFIG only
            processes = [
                Process(p.name, p.role, command, {"TF_CONFIG": p.env["TF_CONFIG"]})
                for p in local_processes(stage, command=list(command))
            ]
        _, lines = run_stage(plan, stage, processes)
        return next(float(m[1]) for _, line in lines if (m := re.search(r"examples/s ([\d.]+)$", line)))


def import_tensorflow_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import tensorflow"], check=True, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def throughput_and_startup(work: str, budget: Budget) -> dict:
    training = Training(work, budget)
    cases = [("limit", lambda r: training.handwritten("single", 1)), ("import", lambda r: import_tensorflow_seconds())]
    for mode in budget.modes:
        for n in budget.worker_counts:
            cases.append((f"ours/{mode}/{n}", lambda r, mode=mode, n=n: training.ours(f"{mode}-{n}-r{r}", mode, n)))
        anchor = {"mirrored": "mirrored", "parameter_server": "ps", "horovod": "horovod"}[mode]
        cases.append((f"handwritten/{mode}/2", lambda r, anchor=anchor: training.handwritten(anchor, 2)))
        if mode in SYNC_MODES:
            cases.append((f"sync/{mode}/2", lambda r, mode=mode: training.sync_ms(mode)))
        for rows in budget.sparse_tables:
            for kind in ("sparse", "dense"):
                cases.append(
                    (
                        f"sparse_sync/{mode}/{rows}/{kind}",
                        lambda r, mode=mode, rows=rows, kind=kind: training.sparse_sync_ms(mode, rows, kind == "dense"),
                    )
                )
    samples: dict[str, list] = {name: [] for name, _ in cases}
    for repetition in range(budget.repetitions):
        for name, measure in alternating(cases, repetition):
            samples[name].append(measure(repetition))
            print(f"  {name}: {samples[name][-1]}", flush=True)
    return {"samples": samples, "steps": training.steps, "global_batch": training.spec["training"]["global_batch_size"]}


def airflow_run(work: str, budget: Budget) -> dict:
    """One real run of the example DAG (``airflow dags test``): the Airflow task process's peak memory."""
    env = {
        "AIRFLOW_HOME": os.path.join(work, "airflow_home"),
        "TFDIST_ARTIFACT_ROOT": os.path.join(work, "dag_run"),
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    os.environ.update(env)
    write_digits_partitions(os.path.join(env["TFDIST_ARTIFACT_ROOT"], "raw", "digits"), DAY - dt.timedelta(days=1), 1)
    outcome = airflow_dags_test(
        "digits_nightly", DAY, os.path.join(work, "dags-test.log"), echo=False, conf={"training.epochs": budget.epochs}
    )
    if outcome.state != "success":
        raise RuntimeError(f"the example DAG run ended {outcome.state}: see {outcome.log_path}")
    return {"peak_rss_mb": outcome.peak_rss_mb}


def ratio_row(figure: str, numerators: list[float], denominators: list[float], goal: str, test) -> dict:
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    s = summary(ratios)
    return {"figure": figure, **s, "goal": goal, "met": test(s["median"])}


def training_rows(training: dict, budget: Budget) -> list[dict]:
    t = training["samples"]
    rate = {
        name: [v["examples_per_sec"] if isinstance(v, dict) else v for v in values]
        for name, values in t.items()
        if name.startswith(("ours/", "handwritten/", "limit"))
    }
    batch = training["global_batch"]
    rows = []
    for mode in budget.modes:
        for n in budget.worker_counts:
            rows.append(
                ratio_row(
                    f"throughput {mode}, {n} worker(s) / one process (limit)",
                    rate[f"ours/{mode}/{n}"],
                    rate["limit"],
                    "≥ 0.9" if n == 2 else "",
                    lambda m, n=n: m >= 0.9 if n == 2 else None,
                )
            )
        rows.append(
            ratio_row(
                f"throughput hand-written {mode}, 2 workers / limit",
                rate[f"handwritten/{mode}/2"],
                rate["limit"],
                "",
                lambda m: None,
            )
        )
        rows.append(
            ratio_row(
                f"plugin tax {mode}: ours / hand-written, 2 workers",
                rate[f"ours/{mode}/2"],
                rate[f"handwritten/{mode}/2"],
                "≥ 0.95",
                lambda m: m >= 0.95,
            )
        )
        if mode in SYNC_MODES:  # the best 2 workers could do if compute split perfectly: limit step + sync
            step_ms = [1000 * batch / r for r in rate["limit"]]
            rows.append(
                ratio_row(
                    f"ceiling {mode}, 2 workers: limit step / (limit step + sync alone)",
                    step_ms,
                    [s + sync for s, sync in zip(step_ms, t[f"sync/{mode}/2"], strict=True)],
                    "",
                    lambda m: None,
                )
            )
    for mode in budget.modes:
        for table in budget.sparse_tables:
            rows.append(
                ratio_row(
                    f"embedding sync {mode}, 2 workers, {table:,}-row table: step with the sparse gradient / densified",
                    t[f"sparse_sync/{mode}/{table}/sparse"],
                    t[f"sparse_sync/{mode}/{table}/dense"],
                    "",
                    lambda m: None,
                )
            )
    for mode in budget.modes:
        rows.append(
            ratio_row(
                f"train start → first steps, {mode} 2 workers / bare import tensorflow",
                [v["first_step_seconds"] for v in t[f"ours/{mode}/2"]],
                t["import"],
                "≤ 1.5",
                lambda m: m <= 1.5,
            )
        )
    return rows


def shard_rows(shards: list[dict], budget: Budget) -> list[dict]:
    rows = []
    for s in shards:
        rows.append(
            {
                "figure": f"shard writing, {s['size']:,} rows of {s['input']}: ours / bare TFRecordWriter loop "
                "(per core)",
                "median": s["ratio"],
                "min": s["ratio_min"],
                "max": s["ratio_max"],
                "n": budget.repetitions,
                "goal": "≥ 0.8",
                "met": s["ratio"] >= 0.8,
            }
        )
    return rows


def scaling_rows(scaling: dict) -> list[dict]:
    rows = []
    memory = {int(k): v for k, v in scaling["memory"].items()}
    for factor in PREPARE_FACTORS[1:]:
        rows.append(
            ratio_row(
                f"prepare peak memory, {factor}× input ({memory[factor]['input_mb']:,.0f} MB, a distinct user id "
                "per row) / 1× (one writer process)",
                [memory[factor]["peak_rss_mb"]],
                [memory[1]["peak_rss_mb"]],
                "≤ 1.5",
                lambda m: m <= 1.5,
            )
        )
    writers = {int(k): v for k, v in scaling["writers"].items()}
    rows.append(
        ratio_row(
            "prepare records/s, 2 writer processes / 1 (8× input)", writers[2], writers[1], "≥ 1.5", lambda m: m >= 1.5
        )
    )
    rows.append(
        ratio_row(
            "prepare records/s with the data statistics and vocabularies / without (8× input, one writer)",
            scaling["statistics"]["with"],
            scaling["statistics"]["without"],
            "≥ 0.85",
            lambda m: m >= 0.85,
        )
    )
    top = max(memory)
    rows.append(
        ratio_row(
            f"data gate seconds, {top}× input / 1×",
            [memory[top]["data_gate_seconds"]],
            [memory[1]["data_gate_seconds"]],
            "≤ 1.5 (independent of the input)",
            lambda m: m <= 1.5,
        )
    )
    return rows


def training_absolutes(training: dict) -> list[tuple[str, str]]:
    t = training["samples"]
    out = [
        ("limit: one hand-written process, all cores", f"{statistics.median(t['limit']):,.0f} examples/s"),
        ("bare import tensorflow", f"{statistics.median(t['import']):.2f} s"),
    ]
    for name, values in t.items():
        if name.startswith("ours/"):
            out.append(
                (f"{name}: throughput", f"{statistics.median(v['examples_per_sec'] for v in values):,.0f} examples/s")
            )
            out.append(
                (f"{name}: start → first steps", f"{statistics.median(v['first_step_seconds'] for v in values):.2f} s")
            )
            out.append((f"{name}: peak RSS per worker (largest)", f"{max(v['peak_rss_mb'] for v in values):,.0f} MB"))
        elif name.startswith("handwritten/"):
            out.append((f"{name}: throughput", f"{statistics.median(values):,.0f} examples/s"))
        elif name.startswith("sync/"):
            out.append((f"{name}: gradient sync + update alone", f"{statistics.median(values):.3f} ms per step"))
        elif name.startswith("sparse_sync/"):
            out.append((f"{name}: lookup, gradient sync, update", f"{statistics.median(values):.3f} ms per step"))
    return out


def shard_absolutes(shards: list[dict]) -> list[tuple[str, str]]:
    out = []
    for s in shards:
        out.append(
            (
                f"shards, {s['size']:,} rows of {s['input']}: ours",
                f"{s['ours_records_per_s']:,.0f} records/s, {s['ours_mb_per_s']:.1f} MB/s",
            )
        )
        out.append(
            (
                f"shards, {s['size']:,} rows of {s['input']}: bare loop",
                f"{s['bare_records_per_s']:,.0f} records/s, {s['bare_mb_per_s']:.1f} MB/s",
            )
        )
    return out


def scaling_absolutes(scaling: dict) -> list[tuple[str, str]]:
    out = []
    for factor, m in scaling["memory"].items():
        out.append(
            (
                f"prepare, {factor}× input: {m['input_mb']:,.0f} MB, {m['rows']:,} rows ({m['distinct_users']:,} user "
                "ids, estimated), one writer",
                f"peak RSS {m['peak_rss_mb']:,.0f} MB (processes together), {m['records_per_s']:,.0f} records/s",
            )
        )
    for factor, m in scaling["memory"].items():
        out.append(
            (
                f"data gate, {factor}× input: read the statistics and check them",
                f"{1000 * m['data_gate_seconds']:.1f} ms",
            )
        )
    for processes, rates in scaling["writers"].items():
        out.append((f"prepare, 8× input, {processes} writer process(es)", f"{statistics.median(rates):,.0f} records/s"))
    return out


@dataclass(frozen=True)
class Section:
    """A part of ``make bench``: what it prints while it runs, how it measures (in its work directory, on the
    budget), and the table's rows and absolute figures from what it measured."""

    title: str
    measure: Callable[[str, Budget, argparse.Namespace], Any]
    rows: Callable[[Any, Budget], list[dict]]
    absolutes: Callable[[Any], list[tuple[str, str]]]


def budgeted(title: str, module: Any) -> Section:
    """The section of a bench module whose ``measure`` takes the whole budget."""
    return Section(
        title,
        lambda work, budget, args: module.measure(work, budget),
        lambda results, budget: module.rows(results, ratio_row),
        module.absolutes,
    )


SECTIONS = {
    "training": Section(
        "training throughput and start-up",
        lambda work, budget, args: throughput_and_startup(work, budget),
        training_rows,
        training_absolutes,
    ),
    "parse": Section(
        "DAG file parse",
        lambda work, budget, args: parse.measure(work, budget.parse_repetitions, args.parse_baseline or None),
        lambda results, budget: parse.rows(results, ratio_row),
        parse.absolutes,
    ),
    "shards": Section(
        "shard writing",
        lambda work, budget, args: shards.measure(work, budget.shard_sizes, budget.repetitions),
        shard_rows,
        shard_absolutes,
    ),
    "prepare_scaling": Section(
        "prepare_data at scale",
        lambda work, budget, args: shards.scaling(work, budget.prepare_base_mb, PREPARE_FACTORS, budget.repetitions),
        lambda results, budget: scaling_rows(results),
        scaling_absolutes,
    ),
    "follow": Section(
        "following a Kubernetes stage",
        lambda work, budget, args: follow.measure(work, budget.follow_pods, budget.follow_seconds),
        lambda results, budget: follow.rows(results, ratio_row),
        follow.absolutes,
    ),
    "warm_start": budgeted("warm start and the cost of summaries", warm_start),
    "categorical": budgeted("the tax of categorical features", categorical),
    "ctr": budgeted("the CTR workload: large embedding tables by mode", ctr),
    "serving": Section(
        "serving latency",
        lambda work, budget, args: serving.measure(work, budget.serving_calls),
        lambda results, budget: serving.rows(results, ratio_row),
        serving.absolutes,
    ),
    "object_store": budgeted("artifacts in object storage", object_store),
    "airflow": Section(
        "one example DAG run on Airflow",
        lambda work, budget, args: airflow_run(work, budget),
        lambda results, budget: [],
        lambda results: [
            ("Airflow task process peak RSS (airflow dags test, workers excluded)", f"{results['peak_rss_mb']:,.0f} MB")
        ],
    ),
}


def markdown(rows: list[dict], absolute: list[tuple[str, str]], header: str) -> str:
    lines = [header, "", "| figure | median | spread | goal | met |", "|---|---|---|---|---|"]
    for r in rows:
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        lines.append(
            f"| {r['figure']} | {r['median']:.2f} | {r['min']:.2f}–{r['max']:.2f} (n={r['n']}) | {r['goal']} | {met} |"
        )
    lines += ["", "| measured | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in absolute)]
    return "\n".join(lines) + "\n"


def chart(training: dict, budget: Budget, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = training["samples"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / (len(budget.worker_counts) + 1)
    for i, mode in enumerate(budget.modes):
        bars = [
            (f"ours, {n} worker(s)", [v["examples_per_sec"] for v in t[f"ours/{mode}/{n}"]])
            for n in budget.worker_counts
        ]
        bars.append(("hand-written, 2 workers", t[f"handwritten/{mode}/2"]))
        for j, (label, values) in enumerate(bars):
            ax.bar(
                i + j * width,
                statistics.median(values),
                width,
                color=f"C{j}",
                label=label if i == 0 else None,
                yerr=[[statistics.median(values) - min(values)], [max(values) - statistics.median(values)]],
            )
    limit = statistics.median(t["limit"])
    ax.axhline(limit, color="k", linestyle="--", label="limit: one process, all cores")
    ax.set_ylim(0, limit * 1.4)
    ax.set_xticks([i + width * len(budget.worker_counts) / 2 for i in range(len(budget.modes))], list(budget.modes))
    ax.set_ylabel("examples/s (median, min–max)")
    ax.set_title(f"Digits CNN training throughput on {os.cpu_count()} cores")
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def results_name(chosen: list[str], every: list[str]) -> str:
    """The results files' name: 'latest' for a run of every section, else the sections' names ('ctr-serving')."""
    return "latest" if chosen == every else "-".join(chosen)


PARTIAL = ".partial"
"""Suffix of the results files a run rewrites as each section ends (``latest.partial.md``): what a stopped run
measured. A finished run writes its own files and removes these."""


def write_results(args: argparse.Namespace, every: list[str], results: dict, minutes: dict, started: float) -> str:
    """Write the results of the sections measured so far (in ``results``) as ``<name>.md`` and ``<name>.json`` once
    every section chosen has run, as ``<name>.partial.*`` before; the markdown."""
    budget, chosen = BUDGETS[args.budget], [name for name in every if name in args.sections]
    done = [name for name in chosen if name in results]
    rows = [row for name in done for row in SECTIONS[name].rows(results[name], budget)]
    absolute = [figure for name in done for figure in SECTIONS[name].absolutes(results[name])]
    total = (time.monotonic() - started) / 60
    header = f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d} with `make bench` (budget {args.budget}"
    header += "" if chosen == every else f", sections {', '.join(chosen)}"
    header += f": {budget.repetitions} repetition(s)"
    if "training" in results:
        header += f", {results['training']['steps']} training steps per run"
    header += f") on {os.cpu_count()} cores, in {total:.0f} min ("
    header += ", ".join(f"{name} {m:.0f}" for name, m in minutes.items()) + ")."
    if done != chosen:
        header += f" Not finished: {', '.join(name for name in chosen if name not in results)} still to run."
    name = results_name(chosen, every)
    written = {"budget": args.budget, "minutes": round(total, 1), "section_minutes": minutes}
    written |= {"rows": rows, "absolute": absolute, "results": results}
    text = markdown(rows, absolute, header)
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if done == chosen else PARTIAL
    with open(os.path.join(args.out, f"{name}{suffix}.json"), "w") as f:
        json.dump(written, f, indent=1)
    with open(os.path.join(args.out, f"{name}{suffix}.md"), "w") as f:
        f.write(text)
    if not suffix:
        for extension in (".json", ".md"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(args.out, f"{name}{PARTIAL}{extension}"))
        if name == "latest":
            chart(results["training"], budget, os.path.join(args.out, "throughput.png"))
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="full")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    parser.add_argument(
        "--parse-baseline",
        default=parse.BASELINE,
        help="the commit whose code the DAG-file parse is measured against in the same run ('' for none)",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=list(SECTIONS),
        default=list(SECTIONS),
        metavar="SECTION",
        help=f"measure only these ({', '.join(SECTIONS)}; default: all, 'airflow' on the full budget only)",
    )
    args = parser.parse_args()
    budget = BUDGETS[args.budget]
    every = [name for name in SECTIONS if name != "airflow" or budget.airflow_run]
    if not set(every) & set(args.sections):
        parser.error(f"none of the sections named runs on the {args.budget} budget ({', '.join(every)} do)")
    os.chdir(REPO)  # worker processes run "python -m bench.handwritten"
    work = tempfile.mkdtemp(prefix="tfdist-bench-")
    results, minutes, started = {}, {}, time.monotonic()
    try:
        for name in (name for name in every if name in args.sections):
            print(SECTIONS[name].title, flush=True)
            os.makedirs(directory := os.path.join(work, name))
            section_started = time.monotonic()
            results[name] = SECTIONS[name].measure(directory, budget, args)
            minutes[name] = round((time.monotonic() - section_started) / 60, 1)
            print(f"  ({minutes[name]} min)", flush=True)
            text = write_results(args, every, results, minutes, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n" + text)


if __name__ == "__main__":
    main()
