// What the page computes from the plugin's records without the DOM: a run's overrides, verdict and start, the
// table's order and filters, a delta's verdict, a version's lineage, a curve's metrics (tests/operators/web/js/).

import {isNum} from "./format.js";

export const LIVE_STATES = new Set(["queued", "running"]);

const overrideText = ([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`;
export const overridesOf = (run) => Object.entries(run.overrides || {}).map(overrideText);
export const verdictOf = (run) => ({true: "blessed", false: "refused"})[run.blessed] ?? "unevaluated";
/** How a run or version started: "warm start from v3", "cold start: <why>", null when not recorded (older ones). */
export const startOf = (parent, coldStart) =>
  isNum(parent) ? `warm start from v${parent}` : coldStart ? `cold start: ${coldStart}` : null;

/** Refused before blessed, each by its tightest check's margin (a refusal fails a check: its margin is < 0; a
 * check on a metric the eval data left undefined has none, and comes first). */
export function gateOrder(run) {
  if (run.blessed === null || run.blessed === undefined) return null;
  return run.checks.length ? Math.min(...run.checks.map((c) => c.margin ?? -Infinity)) : run.blessed ? 1e9 : -1e9;
}

/** The runs by value(run), numbers by size, text naturally ("run 10" after "run 9"); empty values last either way. */
export function sortRuns(runs, value, desc) {
  const sign = desc ? -1 : 1;
  const missing = (v) => v === null || v === undefined || v === "";
  return [...runs].sort((a, b) => {
    const [va, vb] = [value(a), value(b)];
    if (missing(va) || missing(vb)) return missing(va) - missing(vb);
    return sign * (typeof va === "number" ? va - vb : String(va).localeCompare(String(vb), "en", {numeric: true}));
  });
}

/** The runs of a run type ("unknown": not in Airflow), with an override ("-": none), whose id holds a text. */
export function filterRuns(runs, {type, override, text}) {
  const needle = text.trim().toLowerCase();
  return runs.filter(
    (r) =>
      (!type || (r.run_type || "unknown") === type) &&
      (!override || (override === "-" ? overridesOf(r).length === 0 : overridesOf(r).includes(override))) &&
      (!needle || r.run_id.toLowerCase().includes(needle)),
  );
}

/** "good" or "bad": a change of a metric against the baseline by its direction; null without either. */
export const deltaVerdict = (direction, delta) =>
  delta && direction ? ((direction === "lower_is_better" ? -delta : delta) > 0 ? "good" : "bad") : null;

/** The version, its parent, and so on back, as far as the versions kept go (a cycle stops it). */
export function lineageChain(versions, version) {
  const byVersion = new Map(versions.map((v) => [v.version, v]));
  const chain = [];
  for (let v = version; v && !chain.includes(v); v = byVersion.get(v.parent)) chain.push(v);
  return chain;
}

const CURVE_FIELDS = new Set(["step", "examples_per_sec", "learning_rate", "schema_version"]);
/** The curve's charts: the loss, then each train metric its points hold (accuracy, auc, rmse). */
export const curveMetrics = (points) =>
  [...new Set(["loss", ...points.flatMap(Object.keys)])].filter((k) => !CURVE_FIELDS.has(k));
