// The charts' scales and what they say without the DOM: ticks, extents, series colours, the gate's rules
// (tests/operators/web/js/scales.test.mjs).

import {isNum, pad2} from "./format.js";

export const HOUR = 3600e3;
export const DAY = 24 * HOUR;
const PALETTE_SIZE = 8;
const SHORT_DATE = new Intl.DateTimeFormat("en-US", {month: "short", day: "numeric", timeZone: "UTC"});
const MONTH = new Intl.DateTimeFormat("en-US", {month: "short", year: "numeric", timeZone: "UTC"});

/** A colour per series: the scheduled runs', the manual ones', then the backfill experiments' by name. */
export function seriesColors(runs) {
  const rank = (s) => ({scheduled: 0, manual: 1})[s] ?? 2;
  const names = [...new Set(runs.map((r) => r.series))].sort(
    (a, b) => rank(a) - rank(b) || String(a).localeCompare(String(b), "en", {numeric: true}),
  );
  return new Map(names.map((name, i) => [name, {"--c": `var(--s${i % PALETTE_SIZE})`}]));
}

export function niceTicks(low, high, wanted) {
  const raw = (high - low) / wanted;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const [from, to] = [Math.floor(low / step + 1e-9), Math.ceil(high / step - 1e-9)];
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return {
    min: from * step,
    max: to * step,
    digits,
    ticks: Array.from({length: to - from + 1}, (_, i) => Number(((from + i) * step).toFixed(digits))),
  };
}

export function timeTicks(t0, t1, most) {
  const step = [HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY].find(
    (s) => (t1 - t0) / s <= most,
  );
  const ticks = [];
  if (step) {
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
    return {
      ticks,
      label: (t) => (step < DAY && t % DAY ? `${pad2(new Date(t).getUTCHours())}:00` : SHORT_DATE.format(t)),
    };
  }
  const months = [1, 2, 3, 6, 12, 24, 60].find((m) => (t1 - t0) / (m * 30.44 * DAY) <= most) || 120;
  const month = (m) => Date.UTC(Math.floor(m / 12), m % 12); // m: months since year 0
  const first = new Date(t0);
  for (
    let m = Math.ceil((first.getUTCFullYear() * 12 + first.getUTCMonth() + 1) / months) * months;
    month(m) <= t1;
    m += months
  )
    ticks.push(month(m));
  return {ticks, label: (t) => MONTH.format(t)};
}

/** [low, high] of values, widened by 6 % and to at least minSpan. */
export function extent(values, minSpan) {
  const [low, high] = [Math.min(...values), Math.max(...values)];
  const pad = Math.max((high - low) * 0.06, (minSpan - (high - low)) / 2, 0);
  return [low - pad, high + pad];
}

/** A value axis for values: never below 0 for non-negative values, nor above 1 for shares (accuracy). */
export function valueAxis(values, wanted) {
  const [low, high] = extent(values, Math.abs(values[0]) * 0.02 || 0.01);
  const unit = values.every((v) => v >= 0 && v <= 1);
  return niceTicks(Math.min(...values) >= 0 ? Math.max(0, low) : low, unit ? Math.min(1, high) : high, wanted);
}

/** The gate's rules on a metric: "≥ 0.9", "≤ 0.2", "at most 0.01 and 5 % worse than the baseline". */
export function gateRules(data, metric) {
  const bounds = data.thresholds?.[metric] || {};
  const change = data.change_thresholds?.[metric];
  const allowed = [
    change?.absolute,
    isNum(change?.relative) && `${Number((change.relative * 100).toPrecision(6))} %`,
  ].filter((v) => isNum(v) || v);
  return [
    isNum(bounds.lower) && `≥ ${bounds.lower}`,
    isNum(bounds.upper) && `≤ ${bounds.upper}`,
    allowed.length && `at most ${allowed.join(" and ")} worse than the baseline`,
  ].filter(Boolean);
}
