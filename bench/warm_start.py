"""Warm start and its summaries (``make bench``, issue 28), on the tests' small spec (tests/support/specs.py: an MLP,
global batch 64) and the digits data's daily partitions, 1 worker, through the local launcher.

Steps to the cold run's accuracy, per seed (``training.seed``): day 1 trained cold and exported (the parent); on
day 2 a cold run and a run warm-started from the parent (``warm_start: baseline``), both of the same epochs, each
checkpoint (every CHECKPOINT_EVERY steps, all kept) scored on day 2's eval split by the evaluate stage
(``validation.checkpoint.mode: best`` scores every retained one). The figure: the warm run's first checkpoint at
or above the cold run's final accuracy, over the cold run's steps.

Cost of the summaries: train throughput with TensorBoard summaries and curve points every
``summary_every_steps`` (its default) against only at the last step; and with one every step call, where the cost
of one stands out of a shared machine's noise. Each figure the best of a few runs."""

from __future__ import annotations

import datetime as dt
import logging
import os
import statistics

from tests.support.plans import prepared_plan, run
from tests.support.specs import DAY, SMALL_SPEC
from tfdist.contract.progress import read_curve
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.demo import write_digits_partitions
from tfdist.spec.training import TrainingSpec
from tfdist.trainer.train import STEPS_PER_CALL  # the first step call (tracing) is outside the measured window

CHECKPOINT_EVERY = 5
FRACTIONS = (0.125, 0.25, 0.5)
"""Where both runs' accuracies are shown side by side too: these fractions of the cold run's steps."""
GATE = {"thresholds": {"accuracy": {"lower": 0.5}}}  # the parent must be published, however few its epochs
BATCH = SMALL_SPEC["training"]["global_batch_size"]
SUMMARY_DEFAULT = TrainingSpec.model_fields["summary_every_steps"].default
NEVER = 10**6
"""A checkpoint or summary interval longer than any run here: only the last step's."""
INTERVALS = {"default": SUMMARY_DEFAULT, "every_call": STEPS_PER_CALL, "off": NEVER}
"""The summary intervals whose throughputs are measured."""


def plan(root: str, run_id: str, day: dt.date, seed: int, **training):
    """A 1-worker run of the small spec on ``day``'s partition, its data prepared, publishing to a model of
    ``seed``'s own (each seed's day 2 finds its own parent)."""
    return prepared_plan(
        root,
        run_id,
        day,
        training={"num_workers": 1, "seed": seed, **training},
        validation={**GATE, "checkpoint": {"mode": "best"}},
        export={"model_name": f"warm_start_bench_{seed}"},
    )


def scored(root: str, run_id: str, seed: int, epochs: int, warm: bool) -> dict:
    """Train a day-2 run and score every checkpoint: {"curve": [[step, eval accuracy], ...], "parent": the
    parent version's accuracy on the same eval split (the evaluate stage's baseline)}."""
    p = plan(
        root,
        run_id,
        DAY,
        seed,
        epochs=epochs,
        checkpoint_every_steps=CHECKPOINT_EVERY,
        keep_checkpoints=NEVER,
        warm_start="baseline" if warm else "none",
    )
    run(p, "train")
    if warm and read_json(p.layout.warm_start_file)["restored"] != "model and optimizer":
        raise RuntimeError(f"{run_id} did not warm-start: {read_json(p.layout.warm_start_file)['cold_start']}")
    run(p, "evaluate")
    blessing = read_json(p.layout.blessing_file)
    return {
        "curve": sorted([c["step"], c["metrics"]["accuracy"]] for c in blessing["candidates"]),
        "parent": blessing["baseline"]["metrics"]["accuracy"],
    }


def first_reaching(curve: list[list], accuracy: float) -> int | None:
    return next((step for step, a in curve if a >= accuracy), None)


def one_seed(root: str, seed: int, epochs: int) -> dict:
    """Day 1 cold and published; day 2 cold and warm, scored along the way."""
    parent = plan(root, f"parent-{seed}", DAY - dt.timedelta(days=1), seed, epochs=epochs, checkpoint_every_steps=NEVER)
    for task_id in ("train", "evaluate", "export"):
        run(parent, task_id)
    cold = scored(root, f"cold-{seed}", seed, epochs, warm=False)
    warm = scored(root, f"warm-{seed}", seed, epochs, warm=True)
    steps, accuracy = cold["curve"][-1]
    return {
        "seed": seed,
        "cold_steps": steps,
        "cold_accuracy": accuracy,
        "parent_accuracy": warm["parent"],
        "warm_steps": first_reaching(warm["curve"], accuracy),
        "cold": cold["curve"],
        "warm": warm["curve"],
    }


def throughput(root: str, run_id: str, epochs: int, summary_every: int) -> tuple[float, int, int]:
    """(train examples/s, steps, curve points) of a 1-worker run (checkpoints only at the end)."""
    p = plan(root, run_id, DAY, 0, epochs=epochs, checkpoint_every_steps=NEVER, summary_every_steps=summary_every)
    run(p, "train")
    result = read_json(p.layout.result("train"))
    points, steps = len(read_curve(p.layout.curve_file)), result["final_step"]
    if not steps // summary_every <= points <= steps // summary_every + 1:  # one per interval crossed, and the last
        raise RuntimeError(f"{run_id}: {points} curve points in {steps} steps, every {summary_every}")
    return result["examples_per_sec"], steps, points


def summaries_cost(root: str, epochs: int, repetitions: int, best_of: int) -> dict:
    """Per repetition, examples/s at each of INTERVALS, each the best of ``best_of`` runs in alternating order
    (another process on the cores only ever slows a run down); the steps and the curve points of a run at each."""
    samples: dict = {name: [] for name in INTERVALS} | {"points": {}}
    for r in range(repetitions):
        rates: dict[str, list[float]] = {name: [] for name in INTERVALS}
        for k in range(best_of):
            cases = list(INTERVALS.items())
            for name, every in cases if (r * best_of + k) % 2 == 0 else cases[::-1]:
                rate, samples["steps"], samples["points"][name] = throughput(
                    root, f"summaries-{name}-r{r}-{k}", epochs, every
                )
                rates[name].append(rate)
        for name, values in rates.items():
            samples[name].append(max(values))
        print(
            "  summaries: " + ", ".join(f"{name} {samples[name][-1]:,.0f}" for name in INTERVALS) + " examples/s",
            flush=True,
        )
    return samples


def measure(work: str, budget) -> dict:
    """Both parts: ``budget.repetitions`` seeds of ``warm_start_epochs`` runs, as many throughput samples of
    ``summary_epochs`` runs."""
    os.makedirs(work, exist_ok=True)
    logging.getLogger("tfdist.test").propagate = False  # the stages' lines (conftest's loggers) are not shown
    write_digits_partitions(os.path.join(work, "raw", "digits"), DAY, 2)
    seeds = []
    for seed in range(budget.repetitions):
        seeds.append(one_seed(work, seed, budget.warm_start_epochs))
        s = seeds[-1]
        print(
            f"  seed {seed}: cold {s['cold_accuracy']:.4f} at step {s['cold_steps']}, warm reaches it at step "
            f"{s['warm_steps']}",
            flush=True,
        )
    summaries = summaries_cost(work, budget.summary_epochs, budget.repetitions, budget.summary_best_of)
    return {"seeds": seeds, "summaries": summaries}


def warm_steps_or_bound(s: dict) -> int:
    """The warm run's steps to the cold accuracy; not reached: a lower bound, one checkpoint past its last."""
    return s["warm_steps"] if s["warm_steps"] is not None else s["warm"][-1][0] + CHECKPOINT_EVERY


def rows(results: dict, ratio_row) -> list[dict]:
    seeds, summaries = results["seeds"], results["summaries"]
    return [
        ratio_row(
            f"warm start: steps to the cold run's final eval accuracy, warm / cold (day 2, checkpoints every "
            f"{CHECKPOINT_EVERY}; > 1: not reached)",
            [warm_steps_or_bound(s) for s in seeds],
            [s["cold_steps"] for s in seeds],
            "≤ 0.5",
            lambda m: m <= 0.5,
        ),
        ratio_row(
            f"throughput with summaries every {SUMMARY_DEFAULT} steps / only at the last (1 worker)",
            summaries["default"],
            summaries["off"],
            "≥ 0.98",
            lambda m: m >= 0.98,
        ),
    ]


def spread(values: list[float], form: str = "{:.4f}") -> str:
    return f"{form.format(statistics.median(values))} ({form.format(min(values))}–{form.format(max(values))})"


def side_by_side(seeds: list[dict]) -> list[tuple[str, str]]:
    """Both runs' eval accuracy after the same steps: at FRACTIONS of the cold run's, and where the warm one
    reached the cold one's final accuracy."""
    out = []
    for fraction in FRACTIONS:
        at = [
            max(CHECKPOINT_EVERY, round(fraction * s["cold_steps"] / CHECKPOINT_EVERY) * CHECKPOINT_EVERY)
            for s in seeds
        ]
        warm = [dict(s["warm"])[step] for s, step in zip(seeds, at, strict=True)]
        cold = [dict(s["cold"])[step] for s, step in zip(seeds, at, strict=True)]
        out.append(
            (
                f"warm start: eval accuracy after {'/'.join(map(str, sorted(set(at))))} steps "
                f"({fraction:.0%} of the cold run's), warm / cold",
                f"{spread(warm)} / {spread(cold)}",
            )
        )
    reached = [s for s in seeds if s["warm_steps"] is not None]
    if reached:
        out.append(
            (
                "warm start: eval accuracy where the warm run reached it, warm / cold",
                f"{spread([dict(s['warm'])[s['warm_steps']] for s in reached])} / "
                f"{spread([dict(s['cold'])[s['warm_steps']] for s in reached])} (n={len(reached)})",
            )
        )
    return out


def per_summary_ms(summaries: dict) -> list[float]:
    """What one summary costs, from each repetition's throughputs with one every step call and only the last:
    the extra time over the run's examples, over the summaries written before the last step call ended (the
    first one creates the writer)."""
    examples = (summaries["steps"] - STEPS_PER_CALL) * BATCH
    written = summaries["points"]["every_call"] - 1
    return [
        1000 * examples * (1 / f - 1 / o) / written
        for f, o in zip(summaries["every_call"], summaries["off"], strict=True)
    ]


def absolutes(results: dict) -> list[tuple[str, str]]:
    seeds, summaries = results["seeds"], results["summaries"]
    steps = ", ".join(
        f"seed {s['seed']}: "
        + (f"step {s['warm_steps']}" if s["warm_steps"] is not None else f"not reached in {s['warm'][-1][0]}")
        for s in seeds
    )
    already = sum(s["parent_accuracy"] >= s["cold_accuracy"] for s in seeds)
    step_ms = [1000 * BATCH / rate for rate in summaries["off"]]
    return [
        (
            "warm start: the cold run's final eval accuracy (day 2), at step",
            f"{spread([s['cold_accuracy'] for s in seeds])}, {spread([s['cold_steps'] for s in seeds], '{:.0f}')}",
        ),
        (
            "warm start: the parent (day 1's version) on day 2's eval split",
            f"{spread([s['parent_accuracy'] for s in seeds])}; at or above the cold run's in {already} of {len(seeds)}",
        ),
        ("warm start: the warm run's first checkpoint at or above it", steps),
        *side_by_side(seeds),
        (
            f"train throughput, 1 worker, {summaries['steps']} steps, summaries every {SUMMARY_DEFAULT} steps / "
            f"every step call / only the last",
            " / ".join(f"{spread(summaries[name], '{:,.0f}')}" for name in INTERVALS) + " examples/s",
        ),
        (
            "one summary (4 scalars and a curve point), from those every step call / only the last; a training step",
            f"{spread(per_summary_ms(summaries), '{:.2f}')} ms; {spread(step_ms, '{:.2f}')} ms",
        ),
        (
            f"so at one every {SUMMARY_DEFAULT} steps, the summaries' share of the training time",
            f"{statistics.median(per_summary_ms(summaries)) / (SUMMARY_DEFAULT * statistics.median(step_ms)):.1%}",
        ),
    ]
