"""The training-runs page in headless Chromium (Debian's /usr/bin/chromium through Playwright) on a binary task's
runs: the page's files as the plugin serves them, its data as the plugin's routes compute it from run directories
(tfdist.operators.report), no Airflow. The task's metrics and their directions, the curves of the loss and of each
train metric, the live train metrics, the categorical drift table; every column in view at 1,280 px. The page on a
live Airflow is tests/live/test_live_airflow.py's."""

from __future__ import annotations

import json
import os
import time
import urllib.parse

import pytest
from pydantic import BaseModel

from tests.operators.test_report import DAG, write_binary_runs, write_data_gate, write_run
from tests.support.roots import REPO
from tfdist.contract.layout import RunLayout
from tfdist.infra.jsonfiles import write_json_atomic
from tfdist.operators.report import AirflowRun, curve, data_validation, overview, progress
from tfdist.operators.web.api import MEDIA_TYPES, PAGE_FILES, LiveProgress, PipelinePage

pytestmark = pytest.mark.e2e  # starts a browser

SCREENSHOTS = os.environ.get("TFDIST_TEST_ARTIFACTS", os.path.join(REPO, "test-artifacts"))
ORIGIN = "http://tfdist.test"
RUN_RECORDS = {"progress": progress, "curve": curve, "data": data_validation}


def write_curve(layout: RunLayout, steps: int = 5) -> None:
    """curve.jsonl as docs/tabular.md says: the loss and the binary task's train metrics per point."""
    os.makedirs(os.path.dirname(layout.curve_file), exist_ok=True)
    with open(layout.curve_file, "w") as f:
        for i in range(steps):
            point = {"step": 20 * i, "loss": 0.7 - 0.05 * i, "accuracy": 0.6 + 0.03 * i, "auc": 0.65 + 0.04 * i}
            f.write(json.dumps(point | {"examples_per_sec": 9000.0, "learning_rate": 0.003}) + "\n")


@pytest.fixture
def pipeline(tmp_path) -> dict:
    """A binary task's pipeline: version 1, a run compared with it whose data gate warned on a categorical
    feature, and a run training now."""
    root = str(tmp_path)
    _, compared = write_binary_runs(root)
    write_curve(compared)
    write_data_gate(compared)
    live = write_run(root, "manual__now", "manual__now", "2026-11-19T00:00:00+00:00", None)
    record = {"step": 10, "total_steps": 40, "epoch": 0.5, "epochs": 2, "loss": 0.6, "examples_per_sec": 640.0}
    record |= {"workers": 2, "global_batch_size": 64, "elapsed_seconds": 1.0, "updated_at": time.time()}
    write_json_atomic(live.progress_file, record | {"metrics": {"accuracy": 0.7, "auc": 0.7512}})
    states = {"scheduled__1": "success", "scheduled__2": "success", "manual__now": "running"}
    airflow = {r: AirflowRun("scheduled", s, None, None, None, None) for r, s in states.items()}
    runs = overview(DAG, [root], [], airflow, {})
    data = PipelinePage(**dict(runs), dag_id=DAG, description="churn", model_name="churn").model_dump(mode="json")
    return {"root": root, "data": data, "states": states}


def respond(pipeline: dict, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of the plugin's routes the page reads, from the pipeline's run directories."""
    prefix = f"/tfdist/pipelines/{DAG}"
    if path.startswith(("/tfdist/ui/", "/tfdist/static/")):
        name = "page.html" if "/ui/" in path else path.rsplit("/", 1)[1]
        return 200, MEDIA_TYPES[PAGE_FILES[name].suffix], PAGE_FILES[name].read_text()
    if path == "/tfdist/pipelines":
        found: object = [{"pipeline_id": DAG, "dag_id": DAG, "description": "churn"}]
    elif path == prefix:
        found = pipeline["data"]
    else:
        run_id, record = urllib.parse.unquote(path[len(prefix) + len("/runs/") :]).split("/")
        found = RUN_RECORDS[record](os.path.join(pipeline["root"], DAG, "runs", run_id))
        if found and record == "progress":
            found = LiveProgress(**dict(found), state=pipeline["states"][run_id])
        if isinstance(found, BaseModel):  # the route's response model
            found = found.model_dump(mode="json")
    if not found:
        return 404, "application/json", json.dumps({"detail": "not found"})
    shape = found.model_dump(mode="json") if isinstance(found, BaseModel) else found  # as the route's response_model
    if isinstance(shape, dict):  # a typed record's key (tfdist.contract.records), on each: the page reads past it
        shape = {"schema_version": 1} | shape
    return 200, "application/json", json.dumps(shape, allow_nan=False)  # as Starlette's JSONResponse


@pytest.fixture
def browser_page(pipeline):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 2400})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))

            def fulfil(route):
                status, kind, body = respond(pipeline, urllib.parse.urlsplit(route.request.url).path)
                route.fulfill(status=status, content_type=kind, body=body)

            page.route(f"{ORIGIN}/**", fulfil)
            page.goto(f"{ORIGIN}/tfdist/ui/{DAG}?run=scheduled__2")
            yield page
            assert not errors, f"JavaScript errors: {errors}"
        finally:
            browser.close()


def test_the_page_shows_a_binary_tasks_metrics_curves_live_metrics_and_categorical_drift(browser_page):
    page = browser_page
    details = page.locator("tr.details[data-run-id='scheduled__2']")
    details.locator("table.categorical-drift").wait_for()

    # the task's metrics in the spec's order, each chart captioned with its direction
    assert page.locator("#runs-table thead th").all_inner_texts()[4:8] == ["auc", "accuracy", "calibration", "loss"]
    caption = lambda m: page.locator(f"figure.chart-box:has(svg.chart[data-metric='{m}']) figcaption")  # noqa: E731
    assert "higher is better" in caption("auc").inner_text()
    assert "lower is better" in caption("loss").inner_text()
    assert "better" not in caption("calibration").inner_text()

    # deltas against the baseline judged by each metric's direction; calibration has none
    deltas = {
        row.locator("td").first.inner_text(): row.locator("td").last
        for row in details.locator("table.mini:has(th:text('Δ')) tbody tr").all()
    }
    judged = {m: (cell.inner_text(), cell.get_attribute("class")) for m, cell in deltas.items()}
    assert judged == {
        "loss": ("−0.0200", "num good"),
        "calibration": ("−0.0500", "num"),
        "accuracy": ("−0.0100", "num bad"),
        "auc": ("+0.0200", "num good"),
    }

    # the training curves: the loss and each train metric the points hold
    curves = details.locator("svg.curve-chart")
    curves.first.wait_for()
    assert [c.get_attribute("data-metric") for c in curves.all()] == ["loss", "accuracy", "auc"]
    assert {c.get_attribute("data-points") for c in curves.all()} == {"5"}

    # the live card: the train metrics of progress.json
    live = page.locator(".live-run[data-run-id='manual__now'] .stat[data-metric]")
    live.first.wait_for()
    assert [(s.get_attribute("data-metric"), s.locator("span").last.inner_text()) for s in live.all()] == [
        ("accuracy", "0.7000"),
        ("auc", "0.7512"),
    ]

    # the categorical drift table: the distance with the value that moved most, outside the vocabulary, missing
    row = details.locator("table.categorical-drift tr[data-feature='country']")
    cells = row.locator("td")
    assert cells.nth(1).inner_text() == "0.150" and cells.nth(1).get_attribute("class") == "num warn"
    assert cells.nth(2).inner_text() == '"DE" 0.300 → 0.450'
    assert cells.nth(3).inner_text().splitlines() == ["0.080", 'most frequent "PL" 0.050']
    assert cells.nth(4).inner_text().splitlines() == ["0.020", "baseline 0.000"]
    assert cells.nth(4).get_attribute("class") == "num"
    assert details.locator("table.categorical-drift tbody tr").count() == 1  # city: new, nothing to compare
    assert "city new since the baseline" in details.locator(".not-compared").inner_text()

    # sorted by the gate: a check without a margin (its metric undefined on the eval data) is the worst failure
    order = "async checks => (await import('/tfdist/static/records.js')).gateOrder({blessed: false, checks})"
    assert page.evaluate(order, [{"margin": None}, {"margin": 0.2}]) < page.evaluate(order, [{"margin": -5.0}])

    # every column of the runs table in view at 1,280 px
    scroll = page.locator("#runs .scroll")
    right = lambda box: box["x"] + box["width"]  # noqa: E731
    assert right(page.locator("#runs-table > thead th").last.bounding_box()) <= right(scroll.bounding_box()) + 0.5
    assert scroll.evaluate("s => s.scrollWidth <= s.clientWidth")
    os.makedirs(SCREENSHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SCREENSHOTS, "training-runs-binary-1280.png"), full_page=True)
