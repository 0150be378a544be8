// Numbers, durations, times and ids as the page shows them (no DOM: tests/operators/web/js/format.test.mjs).

export const isNum = (v) => typeof v === "number" && Number.isFinite(v);
export const fixed = (v, digits = 4) => (isNum(v) ? v.toFixed(digits) : "—");
export const signed = (v, digits = 4) => (isNum(v) ? (v < 0 ? "−" : "+") + Math.abs(v).toFixed(digits) : "—");
export const count = (v) => (isNum(v) ? Math.round(v).toLocaleString("en-US") : "—");
export const pad2 = (n) => String(n).padStart(2, "0");
export const quoted = (value) => JSON.stringify(value);
export const shortValue = (v) => (isNum(v) ? (Number.isInteger(v) ? count(v) : v.toPrecision(3)) : "—");

export function duration(seconds) {
  if (!isNum(seconds)) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${pad2(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${pad2(Math.floor((s % 3600) / 60))} min`;
}

export const timestamp = (iso) => (iso ? `${new Date(iso).toISOString().slice(0, 19).replace("T", " ")} UTC` : "—");
export const ago = (iso, now = Date.now()) => `${duration(Math.max(0, (now - Date.parse(iso)) / 1000))} ago`;

/** "2026-11-16 → 11-17": the end without the year it shares with the start; hours when not at midnight. */
export function interval(item) {
  const {data_interval_start: from, data_interval_end: to} = item;
  if (!from || !to) return "—";
  const [start, end] = [new Date(from), new Date(to)];
  const timed = [start, end].some((d) => d.getUTCHours() || d.getUTCMinutes());
  const text = (d) =>
    d
      .toISOString()
      .slice(0, timed ? 16 : 10)
      .replace("T", " ");
  const [a, b] = [text(start), text(end)];
  const cut = a.slice(0, 4) !== b.slice(0, 4) ? 0 : timed && a.slice(0, 10) === b.slice(0, 10) ? 11 : 5;
  return `${a} → ${b.slice(cut)}`;
}

/** "scheduled__2026-11-23T00:00:00+00:00" → "2026-11-23 00:00" (the type has its own column). */
export function shortRunId(runId) {
  const found = runId.match(/^(?:\w+?__)?(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?$/);
  if (found) return `${found[1]} ${found[2]}`;
  return runId.length > 30 ? `${runId.slice(0, 16)}…${runId.slice(-12)}` : runId;
}
