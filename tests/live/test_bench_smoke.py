"""``make bench`` still runs end to end on the tiny budget (a smoke test: the figures it prints are not
checked here; benchmarks are not tests). In the extended set (``make test-extended``), beside its tests."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.support.roots import REPO

pytestmark = [pytest.mark.bench, pytest.mark.extended, pytest.mark.e2e]  # slow: out of the fast set too


def make_bench(out, *settings: str, name: str = "latest") -> dict:
    """``make bench`` on the tiny budget with these make variables: what it wrote to ``<name>.json``."""
    done = subprocess.run(
        ["make", "--no-print-directory", "bench", "BENCH_BUDGET=tiny", f"BENCH_OUT={out}", *settings],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3000,  # a hang guard: beside the extended tests it took 25 minutes (16 alone)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / f"{name}.json").read_text())


def test_make_bench_measures_only_the_sections_named(tmp_path):
    out = tmp_path / "results"
    report = make_bench(out, "BENCH_SECTIONS=serving", name="serving")
    assert set(report["results"]) == {"serving"}
    assert report["rows"] and all(row["figure"].startswith("serving latency") for row in report["rows"])
    assert all(figure.startswith("serving latency") for figure, _ in report["absolute"])
    assert "(budget tiny, sections serving: 1 repetition(s)) on" in (out / "serving.md").read_text()
    assert not (out / "latest.md").exists() and not (out / "throughput.png").exists()  # a full run's files


def test_make_bench_runs_on_a_tiny_budget(tmp_path):
    out = tmp_path / "results"
    report = make_bench(out)
    figures = [row["figure"] for row in report["rows"]]
    for expected in (
        "throughput mirrored, 2 worker(s)",
        "plugin tax horovod",
        "train start → first steps",
        "DAG file parse, plugins loaded: digits_nightly",
        "shard writing",
        "prepare records/s with the data statistics and vocabularies / without",
        "data gate seconds",
        "warm start: steps to the cold run's final eval accuracy",
        "throughput with summaries every",
        "embedding sync mirrored, 2 workers, 1,000-row table",
        "embedding sync horovod, 2 workers, 1,000-row table",
        "categorical features: train stage / hand-written",
        "CTR plugin tax, parameter_server",
        "serving latency, one raw row",
        "shard reads from the S3 server",
        "the digits pipeline (5 stages, 2 workers), seconds with an S3 root",
        *(["follow 8 pods / 2 pods: API requests per minute"] if os.geteuid() == 0 else []),
    ):
        assert any(f.startswith(expected) for f in figures), (expected, figures)
    assert all(row["median"] > 0 for row in report["rows"])
    ctr = dict(report["absolute"])["CTR parameter_server, 1,000-row tables"]  # every process's memory, the bytes
    assert all(f"{member} " in ctr for member in ("chief-0", "ps-0", "ps-1", "worker-0", "worker-1")), ctr
    assert "nan" not in ctr, ctr
    text = (out / "latest.md").read_text()
    header = re.search(r"^Measured \d{4}-\d\d-\d\d .* cores, in \d+ min \((.*)\)\.$", text, re.M)
    assert text.count("|") > 20 and header, text[:300]
    assert [part.split()[0] for part in header[1].split(", ")] == list(report["section_minutes"]), header[1]
    assert "training" in report["section_minutes"] and "serving" in report["section_minutes"], report
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("*.partial.*"))  # the files of the sections so far, replaced by the finished run's
    assert "none" in dict(report["absolute"])["TensorFlow modules imported by parsing the DAG files"]
