// The charts' scales (operators/web/scales.js): value and time ticks, extents, series colours, the gate's rules.
import assert from "node:assert/strict";
import {test} from "node:test";

import {
  DAY,
  extent,
  gateRules,
  niceTicks,
  seriesColors,
  timeTicks,
  valueAxis,
} from "../../../../operators/web/scales.js";

test("value ticks: steps of 1, 2 or 5 times a power of ten, covering the range, with the digits they need", () => {
  assert.deepEqual(niceTicks(0.81, 0.97, 5), {min: 0.8, max: 1, digits: 2, ticks: [0.8, 0.85, 0.9, 0.95, 1]});
  assert.deepEqual(niceTicks(0, 180, 5), {min: 0, max: 200, digits: 0, ticks: [0, 50, 100, 150, 200]});
});

test("extents: widened by 6 %, and to at least a span; a value axis stays within [0, 1] for shares", () => {
  assert.deepEqual(extent([10, 20], 1), [9.4, 20.6]);
  assert.deepEqual(extent([5, 5], 2), [4, 6]);
  const shares = valueAxis([0.02, 0.99], 5);
  assert.equal(shares.min, 0);
  assert.equal(shares.max, 1);
  assert.ok(valueAxis([-3, 2], 5).min < -3);
});

test("time ticks: hours within a day, days within weeks, months beyond", () => {
  const t0 = Date.UTC(2026, 10, 16);
  const hours = timeTicks(t0, t0 + DAY, 8);
  assert.deepEqual(hours.ticks.map(hours.label), [
    "Nov 16",
    "03:00",
    "06:00",
    "09:00",
    "12:00",
    "15:00",
    "18:00",
    "21:00",
    "Nov 17",
  ]);
  const days = timeTicks(t0, t0 + 3 * DAY, 4);
  assert.deepEqual(days.ticks.map(days.label), ["Nov 16", "Nov 17", "Nov 18", "Nov 19"]);
  const months = timeTicks(t0, Date.UTC(2027, 2, 1), 4);
  assert.deepEqual(months.ticks.map(months.label), ["Dec 2026", "Jan 2027", "Feb 2027", "Mar 2027"]);
});

test("series colours: scheduled, manual, then the backfill experiments in natural order, the palette repeating", () => {
  const runs = ["exp 10", "manual", "exp 9", "scheduled", "exp 9"].map((series) => ({series}));
  assert.deepEqual(
    [...seriesColors(runs)],
    [
      ["scheduled", {"--c": "var(--s0)"}],
      ["manual", {"--c": "var(--s1)"}],
      ["exp 9", {"--c": "var(--s2)"}],
      ["exp 10", {"--c": "var(--s3)"}],
    ],
  );
  const many = Array.from({length: 9}, (_, i) => ({series: `e${i}`}));
  assert.deepEqual(seriesColors(many).get("e8"), {"--c": "var(--s0)"});
});

test("the gate's rules on a metric: its bounds and the change allowed against the baseline", () => {
  const data = {
    thresholds: {accuracy: {lower: 0.9, upper: null}, loss: {lower: null, upper: 0.2}},
    change_thresholds: {accuracy: {absolute: 0.01, relative: 0.05}},
  };
  assert.deepEqual(gateRules(data, "accuracy"), ["≥ 0.9", "at most 0.01 and 5 % worse than the baseline"]);
  assert.deepEqual(gateRules(data, "loss"), ["≤ 0.2"]);
  assert.deepEqual(gateRules({}, "auc"), []);
});
