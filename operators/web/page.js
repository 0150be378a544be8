"use strict";
// The training-runs page of one tfdist pipeline (at .../ui/<pipeline id>) or the list of pipelines (at .../ui/).
// Data from the plugin's routes next to the page (../pipelines...), fetched as the signed-in Airflow user.

const UI_DIR = new URL("./", location.href);
const API = new URL("../", UI_DIR);
const PIPELINE_ID = decodeURIComponent(location.pathname.slice(location.pathname.lastIndexOf("/") + 1));
const QUERY = new URLSearchParams(location.search);
const SVG_NS = "http://www.w3.org/2000/svg";
const LIVE_STATES = new Set(["queued", "running"]);
const PALETTE_SIZE = 8;
const HOUR = 3600e3, DAY = 24 * HOUR;
const POLL_MS = 2000, BUSY_REFRESH_MS = 10000, IDLE_REFRESH_MS = 60000;

const state = {
  pipelines: [], data: null, chartKey: "", refreshTimer: 0, refreshing: false, polling: false,
  sort: {key: "interval", desc: true},
  filters: {type: "", override: "", text: ""},
  selected: QUERY.get("run"),
  open: new Set(QUERY.has("run") ? [QUERY.get("run")] : []),
  version: QUERY.get("version"),
  scrollPending: QUERY.has("run") || QUERY.has("version"),
  cards: new Map(),   // run id → live card {root, parts, progress}
  dataGates: new Map(),  // run id → the data gate's record (fetched when its details open)
  curves: new Map(),  // run id → {curve, live}: its training curve (null: none yet), fetched while it was live
  curvesLoading: new Set(),  // run ids whose curve is being fetched
  histogram: new Map(),  // run id → the feature element whose histograms are shown
  errors: new Map(),  // source → message
};

// ---- DOM and fetching

const $ = (id) => document.getElementById(id);
const el = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
const svg = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);
const classes = (...names) => names.filter(Boolean).join(" ") || null;

function build(node, attrs = {}, children = []) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "data") Object.assign(node.dataset, value);
    else if (key === "style") for (const [name, v] of Object.entries(value)) node.style.setProperty(name, v);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

const HTTP_ERRORS = {401: "Not signed in to Airflow (401)", 403: "No permission (403)", 404: "Not found (404)"};

async function getJSON(path) {
  let response;
  try {
    response = await fetch(new URL(path, API), {credentials: "same-origin", headers: {Accept: "application/json"}});
  } catch (error) {
    throw Object.assign(new Error(`Could not reach the server: ${error.message}`), {status: 0});
  }
  if (response.ok) return response.json();
  const body = await response.json().catch(() => ({}));
  const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? response.statusText);
  const hint = response.status === 401 ? " Sign in to Airflow, then reload this page." : "";
  const title = HTTP_ERRORS[response.status] ?? `Error ${response.status}`;
  throw Object.assign(new Error(`${title}: ${detail.replace(/\.?$/, ".")}${hint}`), {status: response.status});
}

function setError(source, error) {
  if (error) state.errors.set(source, error.message); else state.errors.delete(source);
  const box = $("error");
  box.hidden = state.errors.size === 0;
  box.replaceChildren(...[...new Set(state.errors.values())].map((message) => el("p", {text: message})));
}

// ---- formatting

const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const fixed = (v, digits = 4) => (isNum(v) ? v.toFixed(digits) : "—");
const signed = (v, digits = 4) => (isNum(v) ? (v < 0 ? "−" : "+") + Math.abs(v).toFixed(digits) : "—");
const count = (v) => (isNum(v) ? Math.round(v).toLocaleString("en-US") : "—");
const pad2 = (n) => String(n).padStart(2, "0");
const SHORT_DATE = new Intl.DateTimeFormat("en-US", {month: "short", day: "numeric", timeZone: "UTC"});
const MONTH = new Intl.DateTimeFormat("en-US", {month: "short", year: "numeric", timeZone: "UTC"});
const overrideText = ([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`;
const overridesOf = (run) => Object.entries(run.overrides || {}).map(overrideText);
const verdictOf = (run) => ({true: "blessed", false: "refused"})[run.blessed] ?? "unevaluated";
/** How a run or version started: "warm start from v3", "cold start: <why>", null when not recorded (older ones). */
const startOf = (parent, coldStart) => (isNum(parent) ? `warm start from v${parent}` : coldStart ? `cold start: ${coldStart}` : null);

function duration(seconds) {
  if (!isNum(seconds)) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${pad2(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${pad2(Math.floor((s % 3600) / 60))} min`;
}

const timestamp = (iso) => (iso ? `${new Date(iso).toISOString().slice(0, 19).replace("T", " ")} UTC` : "—");
const ago = (iso) => `${duration(Math.max(0, (Date.now() - Date.parse(iso)) / 1000))} ago`;

/** "2026-11-16 → 11-17": the end without the year it shares with the start; hours when not at midnight. */
function interval(item) {
  const {data_interval_start: from, data_interval_end: to} = item;
  if (!from || !to) return "—";
  const [start, end] = [new Date(from), new Date(to)];
  const timed = [start, end].some((d) => d.getUTCHours() || d.getUTCMinutes());
  const text = (d) => d.toISOString().slice(0, timed ? 16 : 10).replace("T", " ");
  const [a, b] = [text(start), text(end)];
  const cut = a.slice(0, 4) !== b.slice(0, 4) ? 0 : timed && a.slice(0, 10) === b.slice(0, 10) ? 11 : 5;
  return `${a} → ${b.slice(cut)}`;
}

/** "scheduled__2026-11-23T00:00:00+00:00" → "2026-11-23 00:00" (the type has its own column). */
function shortRunId(runId) {
  const found = runId.match(/^(?:\w+?__)?(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?$/);
  if (found) return `${found[1]} ${found[2]}`;
  return runId.length > 30 ? `${runId.slice(0, 16)}…${runId.slice(-12)}` : runId;
}

// ---- theme: Airflow's colour mode (localStorage "theme", same origin), else the system's

function applyTheme() {
  const stored = ["dark", "light"].find((mode) => localStorage.getItem("theme") === mode);  // Airflow's own setting
  document.documentElement.dataset.theme = stored || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

// ---- top bar and the list of pipelines

function renderTop() {
  const {pipelines, data} = state;
  const known = pipelines.some((p) => p.pipeline_id === PIPELINE_ID);
  $("pipeline-select").replaceChildren(
    el("option", {value: "", text: "Choose a pipeline…", disabled: Boolean(PIPELINE_ID), selected: !PIPELINE_ID}),
    ...(PIPELINE_ID && !known ? [el("option", {value: PIPELINE_ID, text: PIPELINE_ID, selected: true})] : []),
    ...pipelines.map((p) => el("option", {value: p.pipeline_id, text: p.pipeline_id, selected: p.pipeline_id === PIPELINE_ID})));
  const pipeline = data || pipelines.find((p) => p.pipeline_id === PIPELINE_ID);
  $("title").textContent = PIPELINE_ID || "Training runs";
  $("description").textContent = pipeline?.description || "";
  $("model").hidden = !pipeline?.model_name;
  $("model").textContent = pipeline?.model_name ? `model ${pipeline.model_name}` : "";
}

function renderIndex() {
  const section = $("index");
  section.hidden = false;
  section.replaceChildren(el("h2", {text: "Pipelines"}), state.pipelines.length
    ? el("ul", {class: "pipelines"}, state.pipelines.map((p) => el("li", {},
      el("a", {href: new URL(encodeURIComponent(p.pipeline_id), UI_DIR).href, text: p.pipeline_id}),
      p.model_name ? el("span", {class: "chip", text: `model ${p.model_name}`}) : null,
      el("span", {class: "muted", text: p.description || ""}))))
    : el("p", {class: "empty", text: "No pipelines you may read yet: a DAG built from a tfdist spec appears here."}));
}

// ---- live training progress

function renderLive(runs) {
  const live = runs.filter((r) => LIVE_STATES.has(r.state));
  const section = $("live");
  section.hidden = live.length === 0;
  if (!section.firstChild) section.append(el("h2", {text: "Training now"}), el("div", {class: "cards"}));
  const ids = new Set(live.map((r) => r.run_id));
  for (const [runId, card] of state.cards) {
    if (!ids.has(runId)) { card.root.remove(); state.cards.delete(runId); }
  }
  for (const run of live) {
    if (!state.cards.has(run.run_id)) {
      state.cards.set(run.run_id, liveCard(run));
      section.querySelector(".cards").append(state.cards.get(run.run_id).root);
    }
    const card = state.cards.get(run.run_id);
    setStateBadge(card.parts.state, run.state);
    if (run.progress && !card.progress) showProgress(card, run.progress);
  }
  if (live.length && !state.polling) pollProgress();
}

function liveCard(run) {
  const parts = {};
  const part = (name, tag = "span", attrs = {}) => (parts[name] = el(tag, {class: name, text: "—", ...attrs}));
  const stat = (label, name) => el("div", {class: "stat"}, el("span", {class: "label", text: label}), part(name));
  const root = el("div", {class: "live-run waiting", data: {runId: run.run_id}},
    el("div", {class: "live-head"},
      el("button", {type: "button", class: "link run-link", title: run.run_id, text: shortRunId(run.run_id),
        onclick: () => selectRun(run.run_id)}),
      typeBadge(run), part("state", "span", {class: "badge"}), overridesChips(run, null),
      part("updated", "span", {class: "updated muted", text: ""})),
    el("p", {class: "waiting-note", text: "waiting for the first training steps"}),
    el("div", {class: "progress"},
      el("span", {class: "steps"}, part("step"), " / ", part("total-steps"), " steps"),
      el("div", {class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100}, part("fill", "div", {text: ""})),
      part("percent"), part("eta")),
    el("div", {class: "stats"}, stat("epoch", "epoch"), stat("loss", "loss"), part("metrics", "span", {text: ""}),
      stat("examples/s", "rate"), stat("workers", "workers")));
  return {root, parts, progress: null};
}

function setStateBadge(badge, runState) {
  badge.className = `badge state state-${runState || "none"}`;
  badge.textContent = runState || "not in Airflow";
  return badge;
}

function showProgress(card, p) {
  const {parts} = card;
  const percent = p.total_steps ? Math.min(100, (100 * p.step) / p.total_steps) : 0;
  card.progress = p;
  card.root.classList.remove("waiting");
  parts.step.textContent = String(p.step);
  parts["total-steps"].textContent = String(p.total_steps);
  parts.fill.style.width = `${percent}%`;
  parts.fill.parentNode.setAttribute("aria-valuenow", percent.toFixed(0));
  parts.percent.textContent = `${Math.floor(percent)} %`;
  parts.eta.textContent = p.finished ? "training finished"
    : isNum(p.seconds_left) ? `≈ ${duration(p.seconds_left)} left` : "estimating time left…";
  parts.epoch.textContent = `${fixed(p.epoch, 2)} / ${p.epochs}`;
  parts.loss.textContent = fixed(p.loss);
  parts.metrics.replaceChildren(...Object.entries(p.metrics || {}).map(([name, value]) => el("div", {class: "stat", data: {metric: name}},
    el("span", {class: "label", text: name}), el("span", {text: fixed(value)}))));
  parts.rate.textContent = count(p.examples_per_sec);
  parts.workers.textContent = String(p.workers);
  if (p.state) setStateBadge(parts.state, p.state);
}

/** One poll of every live card's progress; a run that left queued/running brings the overview up to date. */
async function pollProgress() {
  const cards = [...state.cards];
  state.polling = cards.length > 0;
  if (!state.polling) return;
  const curves = cards.filter(([runId]) => state.open.has(runId)).map(([runId]) => loadCurve(runId));  // shown ones
  const states = await Promise.all(cards.map(([runId, card]) => pollCard(runId, card)));
  await Promise.all(curves);
  if (states.some((s) => s && !LIVE_STATES.has(s))) refresh();
  setTimeout(pollProgress, POLL_MS);
}

async function pollCard(runId, card) {
  try {
    const progress = await getJSON(`pipelines/${encodeURIComponent(PIPELINE_ID)}/runs/${encodeURIComponent(runId)}/progress`);
    showProgress(card, progress);
    setError("progress", null);
    return progress.state;
  } catch (error) {
    setError("progress", error.status === 404 ? null : error);
    return null;
  } finally {
    const p = card.progress;
    card.parts.updated.textContent = p ? `updated ${ago(p.updated_at)} · training for ${duration(p.elapsed_seconds)}` : "";
  }
}

// ---- charts: one per metric, x = data interval end, a line per series

function seriesColors(runs) {
  const rank = (s) => ({scheduled: 0, manual: 1})[s] ?? 2;
  const names = [...new Set(runs.map((r) => r.series))]
    .sort((a, b) => rank(a) - rank(b) || String(a).localeCompare(String(b), "en", {numeric: true}));
  return new Map(names.map((name, i) => [name, {"--c": `var(--s${i % PALETTE_SIZE})`}]));
}

function niceTicks(low, high, wanted) {
  const raw = (high - low) / wanted;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const [from, to] = [Math.floor(low / step + 1e-9), Math.ceil(high / step - 1e-9)];
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return {min: from * step, max: to * step, digits,
    ticks: Array.from({length: to - from + 1}, (_, i) => Number(((from + i) * step).toFixed(digits)))};
}

function timeTicks(t0, t1, most) {
  const step = [HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY]
    .find((s) => (t1 - t0) / s <= most);
  const ticks = [];
  if (step) {
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
    return {ticks, label: (t) => (step < DAY && t % DAY ? `${pad2(new Date(t).getUTCHours())}:00` : SHORT_DATE.format(t))};
  }
  const months = [1, 2, 3, 6, 12, 24, 60].find((m) => (t1 - t0) / (m * 30.44 * DAY) <= most) || 120;
  const month = (m) => Date.UTC(Math.floor(m / 12), m % 12);  // m: months since year 0
  const first = new Date(t0);
  for (let m = Math.ceil((first.getUTCFullYear() * 12 + first.getUTCMonth() + 1) / months) * months;
    month(m) <= t1; m += months) ticks.push(month(m));
  return {ticks, label: (t) => MONTH.format(t)};
}

/** [low, high] of values, widened by 6 % and to at least minSpan. */
function extent(values, minSpan) {
  const [low, high] = [Math.min(...values), Math.max(...values)];
  const pad = Math.max((high - low) * 0.06, (minSpan - (high - low)) / 2, 0);
  return [low - pad, high + pad];
}

/** A value axis for values: never below 0 for non-negative values, nor above 1 for shares (accuracy). */
function valueAxis(values, wanted) {
  const [low, high] = extent(values, Math.abs(values[0]) * 0.02 || 0.01);
  const unit = values.every((v) => v >= 0 && v <= 1);
  return niceTicks(Math.min(...values) >= 0 ? Math.max(0, low) : low, unit ? Math.min(1, high) : high, wanted);
}

/** Horizontal grid lines at the axis's ticks, labelled on the left. */
const yGrid = (axis, y, left, right) => axis.ticks.flatMap((v) => [svg("line", {class: "grid", x1: left, x2: right, y1: y(v), y2: y(v)}),
  svg("text", {class: "tick", x: left - 8, y: y(v) + 4, "text-anchor": "end", text: v.toFixed(axis.digits)})]);

/** A dashed horizontal line across the plot, labelled at its right end, above or below it. */
const guide = (cls, label, at, left, right, above, attrs = {}) => [svg("line", {class: cls, x1: left, x2: right, y1: at, y2: at, ...attrs}),
  svg("text", {class: `${cls}-label`, x: right - 2, y: at + (above ? -5 : 13), "text-anchor": "end", text: label})];

function gateRules(data, metric) {
  const bounds = data.thresholds?.[metric] || {};
  const change = data.change_thresholds?.[metric];
  const allowed = [change?.absolute, isNum(change?.relative) && `${Number((change.relative * 100).toPrecision(6))} %`]
    .filter((v) => isNum(v) || v);
  return [isNum(bounds.lower) && `≥ ${bounds.lower}`, isNum(bounds.upper) && `≤ ${bounds.upper}`,
    allowed.length && `at most ${allowed.join(" and ")} worse than the baseline`].filter(Boolean);
}

function renderCharts(data) {
  const section = $("charts");
  section.hidden = false;
  const key = JSON.stringify([section.clientWidth, data.metrics, data.thresholds, data.change_thresholds,
    data.runs.map((r) => [r.run_id, r.series, r.series_label, r.data_interval_start, r.data_interval_end, r.metrics,
      r.blessed, r.baseline?.version, r.export_version])]);
  if (key === state.chartKey) return;  // unchanged: keep the drawn charts (and any open tooltip)
  state.chartKey = key;
  const plotted = data.runs.filter((r) => r.metrics && r.data_interval_end);
  const colors = seriesColors(plotted);
  const head = el("h2", {text: "Metrics by data interval"});
  if (!plotted.length) {
    section.replaceChildren(head, el("p", {class: "empty", text:
      "No evaluated runs yet: a chart per metric appears once a run's evaluate task has scored its model."}));
    return;
  }
  const figures = data.metrics.map((metric) => el("figure", {class: "chart-box"}, el("figcaption", {},
    el("strong", {text: metric}), el("span", {class: "muted", text: [data.directions?.[metric]?.replaceAll("_", " "),
      ...gateRules(data, metric).map((r) => `gate ${r}`)].filter(Boolean).join(" · ")}))));
  const grid = el("div", {class: "chart-grid"}, figures);
  section.replaceChildren(head, el("p", {class: "muted note", text:
    "x: end of each run's data interval (UTC). Click a point to see its run."}), legend(plotted, colors), grid);
  data.metrics.forEach((metric, i) => {  // figures in place first: each chart is drawn at its figure's width
    const runs = plotted.filter((r) => isNum(r.metrics[metric]));
    figures[i].append(runs.length ? chart(data, metric, runs, colors, figures[i].clientWidth - 24)
      : el("p", {class: "empty", text: "no evaluated runs yet"}));
  });
  markSelectedPoints();
}

function legend(runs, colors) {
  const labels = new Map(runs.map((r) => [r.series, r.series_label || r.series]));
  const key = (marker, text) => el("span", {class: "key"}, svg("svg", {width: 22, height: 12, "aria-hidden": "true"}, marker), text);
  return el("div", {class: "legend"},
    [...colors].map(([series, style]) => key([svg("line", {class: "series-line", x1: 1, x2: 21, y1: 6, y2: 6, style}),
      svg("circle", {class: "marker blessed", cx: 11, cy: 6, r: 3.5, style})], labels.get(series))),
    el("span", {class: "sep"}),
    key(svg("circle", {class: "marker blessed", cx: 11, cy: 6, r: 4, style: {"--c": "var(--fg)"}}), "blessed"),
    key(refusedMarker(11, 6, 4.5, "marker"), "refused by the gate"),
    key(svg("circle", {class: "marker unevaluated", cx: 11, cy: 6, r: 4}), "not evaluated"),
    key(svg("line", {class: "threshold", x1: 1, x2: 21, y1: 6, y2: 6}), "gate threshold"));
}

function refusedMarker(cx, cy, r, className, attrs = {}) {
  const arm = r * 0.55;
  return [svg("circle", {class: `${className} refused`, cx, cy, r, ...attrs}),
    svg("path", {class: "cross", d: `M${cx - arm} ${cy - arm}L${cx + arm} ${cy + arm}M${cx + arm} ${cy - arm}L${cx - arm} ${cy + arm}`})];
}

function chart(data, metric, runs, colors, width) {
  const [W, H, L, R, T, B] = [Math.max(320, width), 240, 54, 16, 12, 28];
  const bounds = data.thresholds?.[metric] || {};
  const limits = [["lower", bounds.lower], ["upper", bounds.upper]].filter(([, v]) => isNum(v));
  const time = (r) => Date.parse(r.data_interval_end);
  const [x0, x1] = extent(runs.map(time), DAY);
  const yAxis = valueAxis([...runs.map((r) => r.metrics[metric]), ...limits.map(([, v]) => v)], 5);
  const x = (t) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
  const y = (v) => T + (1 - (v - yAxis.min) / (yAxis.max - yAxis.min)) * (H - T - B);
  const root = svg("svg", {class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, data: {metric},
    role: "img", "aria-label": `${metric} by data interval`});
  root.append(...yGrid(yAxis, y, L, W - R));
  const xAxis = timeTicks(x0, x1, Math.max(2, Math.floor((W - L - R) / 90)));
  for (const t of xAxis.ticks) {
    root.append(svg("line", {class: "axis", x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4}),
      svg("text", {class: "tick", x: x(t), y: H - B + 17, "text-anchor": "middle", text: xAxis.label(t)}));
  }
  root.append(svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
  for (const [bound, value] of limits) {
    root.append(...guide("threshold", `${bound} ${value}`, y(value), L, W - R, bound === "lower", {data: {bound}}));
  }
  for (const [series, members] of Map.groupBy(runs, (r) => r.series)) {
    if (members.length < 2) continue;
    const points = members.toSorted((a, b) => time(a) - time(b)).map((r) => `${x(time(r))} ${y(r.metrics[metric])}`);
    root.append(svg("path", {class: "series-line", d: `M${points.join("L")}`, style: colors.get(series)}));
  }
  for (const run of runs) root.append(...chartPoint(run, metric, colors.get(run.series), x(time(run)), y(run.metrics[metric])));
  return root;
}

function chartPoint(run, metric, style, cx, cy) {
  const verdict = verdictOf(run);
  const title = [run.run_id, `data interval ${interval(run)}`, `${metric} ${fixed(run.metrics[metric])}`,
    {blessed: "blessed by the gate", refused: "refused by the gate", unevaluated: "not evaluated"}[verdict] +
      (run.baseline ? ` (vs v${run.baseline.version})` : ""),
    run.export_version ? `version ${run.export_version}` : "no version published"].join("\n");
  const attrs = {cx, cy, r: 5, tabindex: 0, role: "button", "aria-label": `${run.run_id}: ${metric} ${fixed(run.metrics[metric])}`,
    data: {runId: run.run_id}, style, onclick: () => selectRun(run.run_id),
    onkeydown: (e) => e.key === "Enter" && selectRun(run.run_id)};
  const [point, ...rest] = verdict === "refused" ? refusedMarker(cx, cy, 5.5, "point", attrs)
    : [svg("circle", {class: `point ${verdict}`, ...attrs})];
  point.append(svg("title", {text: title}));
  return [point, ...rest];
}

function markSelectedPoints() {
  for (const point of document.querySelectorAll("#charts .point")) {
    point.classList.toggle("selected", point.dataset.runId === state.selected);
  }
}

// ---- runs table

function columns(data) {
  return [
    {key: "run", label: "Run", value: (r) => `${shortRunId(r.run_id)} ${r.run_id}`, cell: runCell},  // as shown
    {key: "type", label: "Type", value: (r) => `${r.run_type || "~"} ${r.series}`, cell: typeBadge, class: "type"},
    {key: "interval", label: "Data interval", value: (r) => Date.parse(r.data_interval_end) || null, class: "interval",
      cell: (r) => el("span", {title: `${timestamp(r.data_interval_start)} → ${timestamp(r.data_interval_end)}`, text: interval(r)})},
    {key: "overrides", label: "Overrides", value: (r) => overridesOf(r).join(" "), cell: (r) => overridesChips(r, "—"), class: "overrides"},
    ...data.metrics.map((m) => ({key: `metric:${m}`, label: m, numeric: true, value: (r) => r.metrics?.[m] ?? null,
      cell: (r) => metricCell(r, m), class: "metric"})),
    {key: "data", label: "Data", value: (r) => r.data_decision ?? null, cell: dataCell, class: "data"},
    {key: "gate", label: "Gate and checks", value: gateOrder, cell: gateCell, class: "gate"},
    {key: "version", label: "Version", numeric: true, value: (r) => r.export_version, cell: (r) => r.export_version ?? "—", class: "version"},
    {key: "duration", label: "Duration", numeric: true, value: (r) => r.duration_seconds, cell: (r) => duration(r.duration_seconds), class: "duration"},
    {key: "rate", label: "Examples/s", numeric: true, value: (r) => r.train_examples_per_sec, cell: (r) => count(r.train_examples_per_sec)},
    {key: "state", label: "State", value: (r) => r.state, cell: (r) => setStateBadge(el("span"), r.state), class: "state"},
  ];
}

const runCell = (r) => [el("span", {class: "caret", "aria-hidden": "true", text: state.open.has(r.run_id) ? "▾" : "▸"}),
  el("span", {class: "run-id", title: r.run_id, text: shortRunId(r.run_id)})];

function typeBadge(run) {
  const type = run.run_type || "unknown";
  return el("span", {class: `badge type type-${type}`, title: run.series_label || null,
    text: type === "backfill" ? run.series : type === "unknown" ? "not in Airflow" : type.replace("_", " ")});
}

function overridesChips(run, none) {
  // "training.<wbr>epochs=<wbr>8": where a chip may wrap in a narrow column
  const chips = overridesOf(run).map((text) => el("span", {class: "chip"}, text.split(/(?<=[.=])/).flatMap((part, i) => (i ? [el("wbr"), part] : part))));
  return chips.length ? el("span", {class: "chips"}, chips) : none;
}

function metricCell(run, metric) {
  const failed = run.checks.some((c) => c.metric === metric && !c.passed);
  return el("span", {class: failed ? "bad" : null, text: fixed(run.metrics?.[metric])});
}

/** Refused before blessed, each by its tightest check's margin (a refusal fails a check: its margin is < 0; a
 * check on a metric the eval data left undefined has none, and comes first). */
function gateOrder(run) {
  if (run.blessed === null || run.blessed === undefined) return null;
  return run.checks.length ? Math.min(...run.checks.map((c) => c.margin ?? -Infinity)) : run.blessed ? 1e9 : -1e9;
}

/** The gate's decision, the baseline it compared with, each threshold as a check with its margin, and the
 * human approval's decision (export.approval). */
function gateCell(run) {
  if (run.blessed === null || run.blessed === undefined) return "—";
  return [el("span", {class: `badge ${run.blessed ? "good" : "bad"}`, text: run.blessed ? "blessed" : "refused"}),
    run.baseline ? el("span", {class: "sub", text: ` vs v${run.baseline.version}`}) : null,
    run.approval ? el("div", {class: `approval ${run.approval.decision}`, text: run.approval_summary}) : null,
    run.checks.length ? el("div", {class: "checks-grid"}, run.checks.map(checkLine)) : null];
}

/** The data gate's decision; the version whose data it compared with when the gate's column does not say it. */
function dataCell(run) {
  if (!run.data_decision) return "—";
  const refused = run.data_decision === "refused";
  const warned = !refused && run.data_failures.length > 0;
  const compared = isNum(run.data_baseline_version) ? `vs v${run.data_baseline_version} data` : null;
  return [el("span", {class: `badge ${refused ? "bad" : warned ? "warn" : "good"}`,
    title: [compared, ...run.data_failures].filter(Boolean).join("\n") || null, text: refused ? "refused" : warned ? "warned" : "passed"}),
  compared && run.data_baseline_version !== run.baseline?.version ? el("div", {class: "sub", text: compared}) : null];
}

const checkLine = (c) => el("div", {class: `check ${c.passed ? "pass" : "fail"}`,
  title: c.kind === "change" ? `value ${fixed(c.value)}, baseline ${fixed(c.baseline)}, change ${signed(c.delta)}, margin ${signed(c.margin)}`
    : `value ${fixed(c.value)}, margin ${signed(c.margin)}`},
el("span", {class: "mark", text: c.passed ? "✓" : "✗"}), el("span", {text: `${c.metric} ${c.rule}`}),
el("span", {class: "margin", text: signed(c.margin)}));

function filteredRuns() {
  const {type, override, text} = state.filters;
  const needle = text.trim().toLowerCase();
  return state.data.runs.filter((r) => (!type || (r.run_type || "unknown") === type)
    && (!override || (override === "-" ? overridesOf(r).length === 0 : overridesOf(r).includes(override)))
    && (!needle || r.run_id.toLowerCase().includes(needle)));
}

function sortRuns(runs, column) {
  const sign = state.sort.desc ? -1 : 1;
  const missing = (v) => v === null || v === undefined || v === "";
  return runs.toSorted((a, b) => {
    const [va, vb] = [column.value(a), column.value(b)];
    if (missing(va) || missing(vb)) return missing(va) - missing(vb);  // empty cells last either way
    return sign * (typeof va === "number" ? va - vb : String(va).localeCompare(String(vb), "en", {numeric: true}));
  });
}

function buildRunsSection() {
  const select = (id, label, key) => el("label", {}, `${label} `,
    el("select", {id, onchange: (e) => { state.filters[key] = e.target.value; renderRuns(); }}));
  $("runs").append(el("h2", {}, "Runs ", el("span", {class: "count muted"})),
    el("div", {class: "filters"}, select("filter-type", "Type", "type"), select("filter-override", "Overrides", "override"),
      el("input", {id: "filter-run", type: "search", placeholder: "Filter by run id…", "aria-label": "Filter by run id",
        oninput: (e) => { state.filters.text = e.target.value; renderRuns(); }}),
      el("button", {type: "button", class: "link clear", text: "clear filters", hidden: true, onclick: clearFilters})),
    el("div", {class: "scroll-frame"}, el("div", {class: "scroll", onscroll: markMoreRight},
      el("table", {id: "runs-table"}, el("thead"), el("tbody")))),
    el("p", {class: "empty", hidden: true}));
}

function setOptions(select, options, key) {
  if (!options.some(([value]) => value === state.filters[key])) state.filters[key] = "";
  select.replaceChildren(...options.map(([value, text]) => el("option", {value, text, selected: value === state.filters[key]})));
}

function renderFilterOptions(data) {
  const types = [...new Set(data.runs.map((r) => r.run_type || "unknown"))].sort();
  const overrides = [...new Set(data.runs.flatMap(overridesOf))].sort();
  setOptions($("filter-type"), [["", "all types"], ...types.map((t) => [t, t === "unknown" ? "not in Airflow" : t.replace("_", " ")])], "type");
  setOptions($("filter-override"), [["", "all"], ["-", "no overrides"], ...overrides.map((o) => [o, o])], "override");
}

function clearFilters() {
  state.filters = {type: "", override: "", text: ""};
  $("filter-type").value = $("filter-override").value = $("filter-run").value = "";
  renderRuns();
}

function renderRuns() {
  const data = state.data;
  const cols = columns(data);
  const column = cols.find((c) => c.key === state.sort.key) || cols[2];
  const runs = sortRuns(filteredRuns(), column);
  const section = $("runs");
  const focused = document.activeElement?.closest("th")?.dataset.sort;
  section.hidden = false;
  section.querySelector("h2 .count").textContent = runs.length === data.runs.length ? `${runs.length}` : `${runs.length} of ${data.runs.length}`;
  section.querySelector(".clear").hidden = !(state.filters.type || state.filters.override || state.filters.text);
  section.querySelector("thead").replaceChildren(el("tr", {}, cols.map(sortHeader)));
  section.querySelector("tbody").replaceChildren(...runs.flatMap((run) => {
    const row = el("tr", {class: classes("run", run.run_id === state.selected && "selected"),
      data: {runId: run.run_id, runType: run.run_type || "unknown"}, "aria-expanded": String(state.open.has(run.run_id)),
      onclick: () => getSelection().isCollapsed && toggleRun(run.run_id)},  // not when selecting text to copy
    cols.map((c) => el("td", {class: classes(c.class, c.numeric && "num")}, c.cell(run))));
    return state.open.has(run.run_id) ? [row, detailsRow(run, cols.length)] : [row];
  }));
  if (focused) section.querySelector(`th[data-sort="${CSS.escape(focused)}"] button`)?.focus();
  section.querySelector(".scroll").hidden = runs.length === 0;
  section.querySelector(".filters").hidden = data.runs.length === 0;
  const empty = section.querySelector(".empty");
  empty.hidden = runs.length > 0;
  empty.textContent = data.runs.length ? "No run matches these filters."
    : "No runs yet: trigger the DAG or wait for its schedule; each run appears here as soon as it starts.";
  markMoreRight();
}

/** A shadow on the runs table's right edge while columns are hidden there (it scrolls sideways when too narrow). */
function markMoreRight() {
  const scroll = $("runs").querySelector(".scroll");
  scroll.parentNode.classList.toggle("more-right", scroll.scrollLeft + scroll.clientWidth < scroll.scrollWidth - 1);
}

function sortHeader(column) {
  const active = state.sort.key === column.key;
  return el("th", {data: {sort: column.key}, class: classes(column.numeric && "num", active && "sorted"),
    "aria-sort": active ? (state.sort.desc ? "descending" : "ascending") : null,
    onclick: () => { state.sort = {key: column.key, desc: active ? !state.sort.desc : false}; renderRuns(); }},
  el("button", {type: "button", class: "sort", title: `Sort by ${column.label}`}, column.label,
    el("span", {class: "arrow", "aria-hidden": "true", text: active ? (state.sort.desc ? "▼" : "▲") : ""})));
}

const WIDE_BLOCKS = new Set(["Training curve", "Data gate"]);

function detailsRow(run, span) {
  const block = (title, aside, ...content) => el("div", {class: classes("block", WIDE_BLOCKS.has(title) && "wide")},
    el("h3", {}, title, aside ? el("span", {class: "aside", text: aside}) : null), ...content);
  return el("tr", {class: "details", data: {runId: run.run_id}}, el("td", {colspan: span}, el("div", {class: "details-grid"},
    block("Gate report", run.gate, run.report.length
      ? el("pre", {class: "report", text: run.report.join("\n")}) : el("p", {class: "muted", text: "Not evaluated yet."}),
    run.failures.length ? el("ul", {class: "failures"}, run.failures.map((f) => el("li", {text: f}))) : null),
    block("Training curve", startOf(run.parent_version, run.cold_start),
      el("div", {class: "curves", data: {runId: run.run_id}}, curveView(run))),
    block("Data gate", run.data_decision, dataGateView(run)),
    block("Baseline", run.baseline && `version ${run.baseline.version}`, baselineTable(run)),
    block("Run", null, runFacts(run)))));
}

// ---- a run's training curve: the loss and each train metric by step, the parent's final values marked (a warm start)

const CURVE_FIELDS = new Set(["step", "examples_per_sec", "learning_rate"]);
/** The curve's charts: the loss, then each train metric its points hold (accuracy, auc, rmse). */
const curveMetrics = (points) => [...new Set(["loss", ...points.flatMap(Object.keys)])].filter((k) => !CURVE_FIELDS.has(k));

function curveView(run) {
  const found = state.curves.get(run.run_id);
  if (!found || (found.live && !LIVE_STATES.has(run.state))) loadCurve(run.run_id);  // once more after it ended
  if (!found) return el("p", {class: "muted", text: "Loading…"});
  if (!found.curve) {
    return el("p", {class: "muted", text: LIVE_STATES.has(run.state) ? "No training steps recorded yet."
      : "No training curve: the run did not train, or trained before curves were recorded."});
  }
  const {points, parent_final: parent, parent_version: version} = found.curve;
  return curveMetrics(points).map((metric) => curveChart(points, metric, version, parent?.[metric]));
}

/** Fetch a run's curve and redraw it in place (its details may be open); null when it has none yet. */
async function loadCurve(runId) {
  if (state.curvesLoading.has(runId)) return;
  state.curvesLoading.add(runId);
  const run = () => state.data.runs.find((r) => r.run_id === runId);
  const live = LIVE_STATES.has(run()?.state);
  try {
    const curve = await getJSON(`pipelines/${encodeURIComponent(PIPELINE_ID)}/runs/${encodeURIComponent(runId)}/curve`);
    state.curves.set(runId, {curve, live});
    setError("curve", null);
  } catch (error) {
    if (error.status === 404) state.curves.set(runId, {curve: null, live}); else setError("curve", error);
  } finally {
    state.curvesLoading.delete(runId);
  }
  const box = document.querySelector(`.curves[data-run-id="${CSS.escape(runId)}"]`);
  if (box && run() && state.curves.has(runId)) box.replaceChildren(...[curveView(run())].flat().filter(Boolean));
}

function curveChart(points, metric, parentVersion, parentFinal) {
  const shown = points.filter((p) => isNum(p[metric]));
  if (!shown.length) return null;
  const [W, H, L, R, T, B] = [460, 200, 50, 14, 14, 30];
  const last = shown.at(-1);
  const xAxis = niceTicks(0, Math.max(1, last.step), 5);
  const yAxis = valueAxis([...shown.map((p) => p[metric]), ...(isNum(parentFinal) ? [parentFinal] : [])], 4);
  const x = (step) => L + (step / xAxis.max) * (W - L - R);
  const y = (v) => T + (1 - (v - yAxis.min) / (yAxis.max - yAxis.min)) * (H - T - B);
  const root = svg("svg", {class: "chart curve-chart", viewBox: `0 0 ${W} ${H}`, role: "img", data: {metric, points: shown.length},
    "aria-label": `training ${metric} by step`}, yGrid(yAxis, y, L, W - R),
  xAxis.ticks.map((s) => [svg("line", {class: "axis", x1: x(s), x2: x(s), y1: H - B, y2: H - B + 4}),
    svg("text", {class: "tick", x: x(s), y: H - B + 17, "text-anchor": "middle", text: count(s)})]),
  svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}),
  isNum(parentFinal) ? guide("parent-final", `parent v${parentVersion} final ${fixed(parentFinal)}`, y(parentFinal), L, W - R,
    last[metric] < parentFinal) : null,  // labelled on the side the curve ends away from
  svg("path", {class: "curve-line", d: `M${shown.map((p) => `${x(p.step).toFixed(1)} ${y(p[metric]).toFixed(1)}`).join("L")}`}),
  svg("circle", {class: "curve-end", cx: x(last.step), cy: y(last[metric]), r: 3.5},
    svg("title", {text: `step ${count(last.step)}: ${metric} ${fixed(last[metric])}`})));
  return el("figure", {class: "curve-box"}, el("figcaption", {}, el("strong", {text: `training ${metric}`}),
    el("span", {class: "muted", text: ` at step ${count(last.step)}: ${fixed(last[metric])}`})), root);
}

// ---- the data gate: drift per feature element, failed checks first, and two histograms overlaid

const DATA_ROWS = 12;

function dataGateView(run) {
  if (!run.data_decision) return el("p", {class: "muted", text: "No data gate record."});
  const record = state.dataGates.get(run.run_id);
  if (!record) {
    getJSON(`pipelines/${encodeURIComponent(PIPELINE_ID)}/runs/${encodeURIComponent(run.run_id)}/data`)
      .then((found) => { state.dataGates.set(run.run_id, found); renderRuns(); })
      .catch((error) => setError("data gate", error));
    return el("p", {class: "muted", text: "Loading…"});
  }
  const categorical = new Set(Object.keys(record.statistics?.categorical || {}));
  const failed = record.checks.filter((c) => !c.passed);
  const drift = record.checks.filter((c) => c.check === "drift" && !categorical.has(c.feature)).sort((a, b) => a.margin - b.margin);
  const rows = [...failed, ...drift.filter((c) => c.passed).slice(0, Math.max(0, DATA_ROWS - failed.length))];
  const shown = state.histogram.get(run.run_id) ?? rows.find((c) => c.check === "drift" && !categorical.has(c.feature))?.feature;
  return [record.why_not_compared ? el("p", {class: "muted", text: `${record.why_not_compared}: only checks needing no baseline ran.`}) : null,
    el("table", {class: "mini data-checks"}, el("thead", {}, el("tr", {}, ["check", "feature", "this run", "baseline", "allowed", "margin"]
      .map((h) => el("th", {class: ["check", "feature", "allowed"].includes(h) ? null : "num", text: h})))),
    el("tbody", {}, rows.map((c) => el("tr", {class: classes(!c.passed && (c.mode === "refuse" ? "failed" : "warned"),
      c.feature === shown && c.check === "drift" && "shown"), data: {feature: c.feature},
      title: c.statistic, onclick: () => { state.histogram.set(run.run_id, c.feature); renderRuns(); }},
    el("td", {text: c.check}), el("td", {class: "mono", text: c.feature}), el("td", {class: "num", text: shortValue(c.value)}),
    el("td", {class: "num", text: shortValue(c.baseline)}), el("td", {text: c.rule}),
    el("td", {class: classes("num", c.passed ? "good" : "bad"), text: signed(c.margin, 3)}))))),
    shown ? histogramOverlay(record, shown) : null, categoricalTable(record, categorical),
    record.not_compared?.length ? el("p", {class: "muted not-compared"}, "Not compared (nothing in the baseline's data to compare with): ",
      record.not_compared.map((n, i) => [i ? "; " : null, el("span", {class: "mono", text: n.feature}), ` ${n.why}`])) : null];
}

const quoted = (value) => JSON.stringify(value);

/** Per categorical feature: the L∞ distance of its value shares with the value that moved most, the share of its
 * values outside the baseline's vocabulary with the most frequent one, its missing rate; each against its bound. */
function categoricalTable(record, categorical) {
  const checksOf = (feature) => Object.fromEntries(record.checks.filter((c) => c.feature === feature).map((c) => [c.check, c]));
  const features = [...categorical].map((feature) => [feature, checksOf(feature)]).filter(([, found]) => Object.keys(found).length);
  if (!features.length) return null;
  const cell = (c, text, detail) => (c ? el("td", {class: classes("num", !c.passed && (c.mode === "refuse" ? "bad" : "warn")),
    data: {check: c.check}, title: `${c.statistic}; allowed ${c.rule}; margin ${signed(c.margin, 3)}`}, text, detail ? el("div", {class: "sub", text: detail}) : null)
    : el("td", {class: "num muted", text: "—"}));
  const share = (v) => fixed(v, 3);
  const {drift, vocabulary, missing} = record.settings || {};
  const head = [["feature"], ["L∞ distance", drift && `≤ ${drift.max_distance}`], ["value moved most"],
    ["outside vocabulary", vocabulary && `≤ ${vocabulary.max_oov_share}`], ["missing rate", missing && `change ≤ ${missing.max_change}`]];
  return el("div", {class: "categorical"}, el("h4", {text: "Categorical features"}),
    el("table", {class: "mini categorical-drift"}, el("thead", {}, el("tr", {}, head.map(([h, bound], i) =>
      el("th", {class: i ? "num" : null}, h, bound ? el("div", {class: "sub", text: bound}) : null)))),
    el("tbody", {}, features.map(([feature, c]) => {
      const moved = c.drift?.top_value, outside = c.vocabulary?.top_value;
      return el("tr", {data: {feature}}, el("td", {class: "mono", text: feature}),
        cell(c.drift, share(c.drift?.value), isNum(c.drift?.within) ? `exact to ±${share(c.drift.within)} (top values cut)` : null),
        el("td", {class: "num", text: moved ? `${quoted(moved.value)} ${share(moved.baseline)} → ${share(moved.share)}` : "—"}),
        cell(c.vocabulary, share(c.vocabulary?.value), [outside && `most frequent ${quoted(outside.value)} ${share(outside.share)}`,
          isNum(c.vocabulary?.beyond_top) && `${share(c.vocabulary.beyond_top)} beyond the top values`].filter(Boolean).join("; ")),
        cell(c.missing, share(c.missing?.value), c.missing && `baseline ${share(c.missing.baseline)}`));
    }))));
}

const shortValue = (v) => (isNum(v) ? (Number.isInteger(v) ? count(v) : v.toPrecision(3)) : "—");

/** The feature element's histograms (this run's filled, the baseline's outlined) as shares of their rows. */
function histogramOverlay(record, name) {
  const [feature, index] = name.includes("[") ? [name.slice(0, name.indexOf("[")), Number(name.slice(name.indexOf("[") + 1, -1))] : [name, 0];
  const sides = [record.statistics, record.baseline_statistics].map((s) => s?.features?.[feature]?.histogram?.[index] ?? {});
  const shares = sides.map((h) => { const total = Object.values(h).reduce((a, b) => a + b, 0) || 1;
    return new Map(Object.entries(h).map(([bin, n]) => [Number(bin), n / total])); });
  const bins = [...new Set(shares.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
  if (!bins.length) return null;
  const [width, height, lo, hi] = [320, 90, bins[0], bins[bins.length - 1]];
  const x = (bin) => ((bin - lo) / Math.max(1, hi - lo + 1)) * width, w = width / Math.max(1, hi - lo + 1);
  const top = Math.max(...shares.flatMap((m) => [...m.values()]));
  const bar = (m, cls) => [...m].map(([bin, v]) => svg("rect", {class: cls, x: x(bin), width: Math.max(1, w - 1),
    y: height - (v / top) * height, height: (v / top) * height}));
  return el("figure", {class: "histogram"}, svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": `histograms of ${name}`}, bar(shares[0], "now"), bar(shares[1], "base")),
  el("figcaption", {}, `${name}: this run (filled) and the baseline's data (outlined), share of rows per bin`));
}

function baselineTable(run) {
  if (!run.baseline) return el("p", {class: "muted", text: "No baseline compared: no earlier version, or no change thresholds."});
  const verdict = (metric, delta) => {  // none for a metric without a direction (calibration)
    const direction = state.data.directions?.[metric];
    return delta && direction ? ((direction === "lower_is_better" ? -delta : delta) > 0 ? "good" : "bad") : null;
  };
  return el("table", {class: "mini"}, el("thead", {}, el("tr", {}, ["metric", "baseline", "this run", "Δ"].map((h) =>
    el("th", {class: h === "metric" ? null : "num", text: h})))),
  el("tbody", {}, Object.entries(run.baseline.metrics).map(([metric, base]) => {
    const value = run.metrics?.[metric];
    const delta = isNum(value) && isNum(base) ? value - base : null;
    return el("tr", {}, el("td", {text: metric}), el("td", {class: "num", text: fixed(base)}),
      el("td", {class: "num", text: fixed(value)}),
      el("td", {class: classes("num", verdict(metric, delta)), text: signed(delta)}));
  })));
}

function runFacts(run) {
  const facts = [["run id", el("span", {class: "mono", text: run.run_id})], ["series", run.series_label],
    ["started", timestamp(run.started_at)], ["ended", timestamp(run.ended_at)], ["duration", duration(run.duration_seconds)],
    ["final step", run.final_step ?? "—"], ["examples/s", count(run.train_examples_per_sec)],
    ["version", run.export_version ?? "none published"], ["overrides", overridesChips(run, "none")]];
  return el("dl", {class: "facts"}, facts.map(([term, value]) => [el("dt", {text: term}), el("dd", {}, value ?? "—")]));
}

function toggleRun(runId) {
  const opening = !state.open.has(runId);
  if (opening) state.open.add(runId); else state.open.delete(runId);
  state.selected = opening ? runId : state.selected === runId ? null : state.selected;
  renderRuns();
  markSelectedPoints();
}

/** Select a run (from a chart point, a live card, a version): highlighted, details open, scrolled to. */
function selectRun(runId) {
  state.selected = runId;
  state.open.add(runId);
  if (!filteredRuns().some((r) => r.run_id === runId)) clearFilters();
  renderRuns();
  markSelectedPoints();
  document.querySelector(`tr.run[data-run-id="${CSS.escape(runId)}"]`)?.scrollIntoView({block: "center", behavior: "smooth"});
}

// ---- versions

const VERSION_COLUMNS = ["Version", "Parent", "Run", "Data interval", "Metrics", "Gate"];

function renderVersions(data) {
  const section = $("versions");
  section.hidden = false;
  const rows = data.versions.flatMap((v) => {
    const selected = String(v.version) === state.version;
    const row = el("tr", {class: classes("version", selected && "selected"), data: {version: String(v.version)},
      onclick: () => selectVersion(selected ? null : v.version)},
    el("td", {}, String(v.version), v.baseline ? el("span", {class: "baseline-badge", text: "current baseline"}) : null,
      v.withdrawn ? el("span", {class: "baseline-badge", title: `by ${v.withdrawn.by} at ${v.withdrawn.at}: ${v.withdrawn.reason}`,
        text: "withdrawn"}) : null),
    el("td", {class: "parent"}, isNum(v.parent) ? versionLink(v.parent)
      : v.cold_start ? el("span", {title: v.cold_start, text: "cold start"}) : "—"),
    el("td", {}, v.run_id ? el("button", {type: "button", class: "link", title: v.run_id, text: shortRunId(v.run_id),
      onclick: (e) => { e.stopPropagation(); selectRun(v.run_id); }}) : "—"),
    el("td", {text: interval(v)}),
    el("td", {}, Object.entries(v.metrics || {}).map(([k, m]) => el("span", {class: "metric-pair"}, `${k} `, el("b", {text: fixed(m)})))),
    el("td", {class: "muted", text: v.gate || "—"}));
    return selected ? [row, el("tr", {class: "lineage"}, el("td", {colspan: VERSION_COLUMNS.length}, lineage(data.versions, v)))] : [row];
  });
  section.replaceChildren(el("h2", {}, "Published versions ", el("span", {class: "count muted", text: String(data.versions.length)})),
    rows.length ? el("div", {class: "scroll"}, el("table", {}, el("thead", {}, el("tr", {}, VERSION_COLUMNS.map((h) => el("th", {text: h})))),
      el("tbody", {}, rows)))
      : el("p", {class: "empty", text: "No published versions yet: export publishes a model once the gate blesses it."}));
}

const versionLink = (version) => el("button", {type: "button", class: "link", text: `v${version}`,
  onclick: (e) => { e.stopPropagation(); selectVersion(version); }});

/** The version, its parent, and so on back: "v4 ← v3 ← v2 (cold start: why)", or to a parent no longer kept. */
function lineage(versions, version) {
  const byVersion = new Map(versions.map((v) => [v.version, v]));
  const chain = [];
  for (let v = version; v && !chain.includes(v); v = byVersion.get(v.parent)) chain.push(v);
  const last = chain.at(-1);
  return el("p", {class: "lineage-chain"}, el("span", {class: "muted", text: "Lineage: "}),
    chain.map((v, i) => [i ? " ← " : null, v === version ? el("b", {text: `v${v.version}`}) : versionLink(v.version)]),
    isNum(last.parent) ? ` ← v${last.parent} (no longer kept)` : ` (${startOf(null, last.cold_start) ?? "start not recorded"})`);
}

function selectVersion(version) {
  state.version = version === null ? null : String(version);
  renderVersions(state.data);
  if (state.version) document.querySelector(`tr.version[data-version="${CSS.escape(state.version)}"]`)?.scrollIntoView({block: "nearest"});
}

// ---- loading

function render(data) {
  state.data = data;
  renderTop();
  renderLive(data.runs);
  renderFilterOptions(data);
  renderRuns();
  renderVersions(data);
  renderCharts(data);
  if (state.scrollPending) scrollToTarget();
}

/** ?version= scrolls to its version (its run still highlighted), ?run= to the run; once, when the row exists. */
function scrollToTarget() {
  const row = state.version ? document.querySelector(`tr.version[data-version="${CSS.escape(state.version)}"]`)
    : document.querySelector(`tr.run[data-run-id="${CSS.escape(state.selected)}"]`);
  if (!row) return;
  state.scrollPending = false;
  row.scrollIntoView({block: "center"});
}

async function refresh() {
  if (state.refreshing) return;
  state.refreshing = true;
  clearTimeout(state.refreshTimer);
  try {
    const data = await getJSON(`pipelines/${encodeURIComponent(PIPELINE_ID)}`);
    setError("overview", null);
    render(data);
  } catch (error) {
    setError("overview", error);
    if (!state.data && error.status) return;  // 401/403/404: nothing to show until the user acts
  } finally {
    state.refreshing = false;
  }
  const busy = state.data?.runs.some((r) => LIVE_STATES.has(r.state));
  state.refreshTimer = setTimeout(refresh, busy ? BUSY_REFRESH_MS : IDLE_REFRESH_MS);
}

async function main() {
  applyTheme();
  addEventListener("storage", applyTheme);
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
  $("pipeline-select").addEventListener("change", (e) => {
    if (e.target.value) location.href = new URL(encodeURIComponent(e.target.value), UI_DIR).href;
  });
  let resizeTimer = 0;
  addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => state.data && (renderCharts(state.data), markMoreRight()), 150);
  });
  try {
    state.pipelines = await getJSON("pipelines");
  } catch (error) {
    setError("pipelines", error);
  }
  renderTop();
  if (!PIPELINE_ID) {
    renderIndex();
    return;
  }
  buildRunsSection();
  await refresh();
}

main();
