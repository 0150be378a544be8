"""The bench's results files (bench/run.py): a run rewrites the sections measured so far as partial files while it
runs, and a finished run writes its own files and removes them."""

from __future__ import annotations

import argparse
import json

from bench import run


def fake_section(name: str) -> run.Section:
    return run.Section(
        name,
        lambda work, budget, args: None,
        lambda results, budget: [
            {"figure": f"{name} ratio", **run.summary([results["seconds"]]), "goal": "", "met": None}
        ],
        lambda results: [(f"{name} seconds", f"{results['seconds']:.1f} s")],
    )


def test_a_run_keeps_what_it_measured_until_it_finishes(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "SECTIONS", {"training": fake_section("training"), "second": fake_section("second")})
    args = argparse.Namespace(budget="tiny", out=str(tmp_path), sections=["training", "second"])
    every, started = ["training", "second"], run.time.monotonic()

    text = run.write_results(args, every, {"training": {"seconds": 2.0, "steps": 10}}, {"training": 0.5}, started)
    assert "Not finished: second still to run." in text and "| training ratio | 2.00 |" in text
    partial = json.loads((tmp_path / "latest.partial.json").read_text())
    assert list(partial["results"]) == ["training"] and partial["section_minutes"] == {"training": 0.5}
    assert not (tmp_path / "latest.json").exists()

    monkeypatch.setattr(run, "chart", lambda *args: None)  # the digits training's chart: not measured here
    text = run.write_results(
        args,
        every,
        {"training": {"seconds": 2.0, "steps": 10}, "second": {"seconds": 3.0, "steps": 10}},
        {"training": 0.5, "second": 1.0},
        started,
    )
    assert "Not finished" not in text and "| second seconds | 3.0 s |" in text
    assert json.loads((tmp_path / "latest.json").read_text())["section_minutes"] == {"training": 0.5, "second": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "latest.md"]


def test_some_sections_are_written_under_their_names_never_over_a_full_run(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "SECTIONS", {"training": fake_section("training"), "second": fake_section("second")})
    args = argparse.Namespace(budget="tiny", out=str(tmp_path), sections=["second"])
    run.write_results(
        args, ["training", "second"], {"second": {"seconds": 1.0, "steps": 10}}, {"second": 0.1}, run.time.monotonic()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["second.json", "second.md"]
