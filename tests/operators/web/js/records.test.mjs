// What the page computes from the plugin's records (operators/web/records.js): the runs table's order and filters,
// the gate's order, a delta's verdict, a version's lineage, a curve's metrics.
import assert from "node:assert/strict";
import {test} from "node:test";

import {
  curveMetrics,
  deltaVerdict,
  filterRuns,
  gateOrder,
  lineageChain,
  overridesOf,
  sortRuns,
  startOf,
  verdictOf,
} from "../../../../operators/web/records.js";

const run = (runId, fields = {}) => ({run_id: runId, run_type: "scheduled", overrides: {}, checks: [], ...fields});

test("a run's overrides as key=value, its gate's verdict, how it started", () => {
  assert.deepEqual(overridesOf(run("a", {overrides: {"training.epochs": 8, "model.name": "wide", x: [1]}})), [
    "training.epochs=8",
    "model.name=wide",
    "x=[1]",
  ]);
  assert.deepEqual(overridesOf({}), []);
  assert.deepEqual(
    [true, false, null, undefined].map((blessed) => verdictOf({blessed})),
    ["blessed", "refused", "unevaluated", "unevaluated"],
  );
  assert.equal(startOf(3, null), "warm start from v3");
  assert.equal(startOf(null, "no parent"), "cold start: no parent");
  assert.equal(startOf(null, null), null);
});

test("the gate's order: refused before blessed, each by its tightest margin; a check without one comes first", () => {
  const order = (checks, blessed = false) => gateOrder({blessed, checks});
  assert.ok(order([{margin: null}, {margin: 0.2}]) < order([{margin: -5.0}]));
  assert.ok(order([{margin: -0.1}]) < order([{margin: 0.3}], true));
  assert.equal(order([], true), 1e9);
  assert.equal(order([], false), -1e9);
  assert.equal(gateOrder({blessed: null, checks: []}), null);
});

test("sorting: numbers by size, text naturally, either way; empty values last both ways", () => {
  const runs = [run("run 10", {v: 2}), run("run 9", {v: null}), run("run 11", {v: 1}), run("run 8", {v: ""})];
  const ids = (sorted) => sorted.map((r) => r.run_id);
  assert.deepEqual(ids(sortRuns(runs, (r) => r.v, false)), ["run 11", "run 10", "run 9", "run 8"]);
  assert.deepEqual(ids(sortRuns(runs, (r) => r.v, true)), ["run 10", "run 11", "run 9", "run 8"]);
  assert.deepEqual(ids(sortRuns(runs, (r) => r.run_id, false)), ["run 8", "run 9", "run 10", "run 11"]);
  assert.deepEqual(ids(runs), ["run 10", "run 9", "run 11", "run 8"]); // a sorted copy
});

test("filters: by run type (unknown: not in Airflow), by override (-: none), by a text in the run id", () => {
  const runs = [
    run("scheduled__1", {overrides: {"training.epochs": 8}}),
    run("manual__2", {run_type: "manual"}),
    run("Lost_3", {run_type: null}),
  ];
  const ids = (filters) => filterRuns(runs, {type: "", override: "", text: "", ...filters}).map((r) => r.run_id);
  assert.deepEqual(ids({}), ["scheduled__1", "manual__2", "Lost_3"]);
  assert.deepEqual(ids({type: "manual"}), ["manual__2"]);
  assert.deepEqual(ids({type: "unknown"}), ["Lost_3"]);
  assert.deepEqual(ids({override: "training.epochs=8"}), ["scheduled__1"]);
  assert.deepEqual(ids({override: "-"}), ["manual__2", "Lost_3"]);
  assert.deepEqual(ids({text: " lost "}), ["Lost_3"]);
});

test("a delta against the baseline: good or bad by the metric's direction, none without a direction or change", () => {
  assert.equal(deltaVerdict("higher_is_better", 0.02), "good");
  assert.equal(deltaVerdict("higher_is_better", -0.02), "bad");
  assert.equal(deltaVerdict("lower_is_better", -0.02), "good");
  assert.equal(deltaVerdict("lower_is_better", 0.02), "bad");
  assert.equal(deltaVerdict(undefined, 0.02), null);
  assert.equal(deltaVerdict("higher_is_better", 0), null);
  assert.equal(deltaVerdict("higher_is_better", null), null);
});

test("a version's lineage: back through its parents as far as the versions kept go, stopped by a cycle", () => {
  const versions = [
    {version: 4, parent: 3},
    {version: 3, parent: 1},
    {version: 1, parent: null},
    {version: 7, parent: 2},
  ];
  const chain = (v) =>
    lineageChain(
      versions,
      versions.find((x) => x.version === v),
    ).map((x) => x.version);
  assert.deepEqual(chain(4), [4, 3, 1]);
  assert.deepEqual(chain(7), [7]); // its parent is no longer kept
  const cycle = [
    {version: 1, parent: 2},
    {version: 2, parent: 1},
  ];
  assert.deepEqual(
    lineageChain(cycle, cycle[0]).map((x) => x.version),
    [1, 2],
  );
});

test("a curve's metrics: the loss first, then each train metric its points hold, not the step's other fields", () => {
  const points = [
    {step: 0, loss: 0.7, accuracy: 0.6, examples_per_sec: 9000, learning_rate: 0.003, schema_version: 1},
    {step: 20, loss: 0.6, accuracy: 0.62, auc: 0.7},
  ];
  assert.deepEqual(curveMetrics(points), ["loss", "accuracy", "auc"]);
  assert.deepEqual(curveMetrics([]), ["loss"]);
});
