"use strict";
// The training-runs page of one tfdist pipeline (or, without one, the list of pipelines). Data from the
// plugin's routes next to this page (../pipelines...), as the signed-in Airflow user.

const API = new URL("../", location.href);
const UI = new URL("ui/", API);
const DAG_ID = decodeURIComponent(location.pathname.split("/ui/").pop().split("/")[0] || "");
const QUERY = new URLSearchParams(location.search);
const SVG = "http://www.w3.org/2000/svg";
const LIVE_STATES = new Set(["running", "queued"]);
const PALETTE = ["#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568"];

const state = {
  data: null, sort: {key: "data_interval_end", desc: true}, filters: {type: "", override: "", text: ""},
  selected: QUERY.get("run"), open: new Set(QUERY.get("run") ? [QUERY.get("run")] : []),
  version: QUERY.get("version"), scrollPending: Boolean(QUERY.get("run") || QUERY.get("version")),
  liveCards: new Map(),
};

function el(tag, props = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    else node.setAttribute(key === "className" ? "class" : key, value);
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

async function getJSON(path) {
  const response = await fetch(new URL(path, API), {credentials: "same-origin", headers: {Accept: "application/json"}});
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch { /* not JSON */ }
    const error = new Error(`${response.status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

// ---- formatting
const num = (value, digits = 4) => (value === null || value === undefined ? "—" : Number(value).toFixed(digits));
const signed = (value, digits = 4) => (value >= 0 ? "+" : "−") + Math.abs(value).toFixed(digits);
const thousands = (value) => (value === null || value === undefined ? "—" : Math.round(value).toLocaleString("en-US"));

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

function when(iso, withTime) {
  if (!iso) return "—";
  const [date, time] = new Date(iso).toISOString().split("T");
  return withTime ? `${date} ${time.slice(0, 5)}` : date;
}

function interval(run) {
  const start = run.data_interval_start, end = run.data_interval_end;
  if (!start || !end) return "—";
  const hourly = !start.includes("T00:00:00") || !end.includes("T00:00:00");
  return `${when(start, hourly)} → ${when(end, hourly)}`;
}

const overrideText = (key, value) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`;
const overridesOf = (run) => Object.entries(run.overrides || {}).map(([k, v]) => overrideText(k, v));
const shortRunId = (runId) => runId.replace(/^(scheduled|manual|backfill|asset_triggered)__/, "")
  .replace(/^(\d{4}-\d\d-\d\d)T(\d\d:\d\d):\d\d(\.\d+)?\+00:00$/, "$1 $2");

function showError(error) {
  const box = document.getElementById("error");
  box.hidden = !error;
  const advice = {401: "Sign in to Airflow to see training runs.", 403: "You may not read the runs of this pipeline."};
  box.textContent = error ? [advice[error.status], error.message].filter(Boolean).join(" ") : "";
}

// ---- top bar and the list of pipelines
function renderTop(pipelines, data) {
  const select = el("select", {id: "pipeline-select", "aria-label": "Pipeline", on: {change: (e) => {
    if (e.target.value) location.href = new URL(encodeURIComponent(e.target.value), UI).href;
  }}}, el("option", {value: "", text: "Choose a pipeline…"}),
  pipelines.map((p) => el("option", {value: p.dag_id, text: p.dag_id, selected: p.dag_id === DAG_ID})));
  const title = data
    ? el("div", {className: "title"}, el("h1", {text: data.dag_id}),
      el("span", {className: "muted", text: [data.description, data.model_name && `model ${data.model_name}`]
        .filter(Boolean).join(" · ")}))
    : el("div", {className: "title"}, el("h1", {text: "Training runs"}));
  document.getElementById("top").replaceChildren(title, el("label", {className: "picker"}, "Pipeline ", select));
}

function renderIndex(pipelines) {
  const section = document.getElementById("index");
  section.hidden = false;
  section.replaceChildren(el("h2", {text: "Pipelines"}), pipelines.length
    ? el("ul", {className: "pipelines"}, pipelines.map((p) => el("li", {},
      el("a", {href: new URL(encodeURIComponent(p.dag_id), UI).href, text: p.dag_id}),
      el("span", {className: "muted", text: p.description || ""}))))
    : el("p", {className: "empty", text: "No tfdist pipeline you may read: a DAG built from a spec appears here."}));
}

// ---- live progress
function renderLive(runs) {
  const section = document.getElementById("live");
  const live = runs.filter((r) => LIVE_STATES.has(r.state));
  section.hidden = live.length === 0;
  const list = section.querySelector(".cards") || section.appendChild(el("div", {className: "cards"}));
  if (!section.querySelector("h2")) section.prepend(el("h2", {text: "Training now"}));
  for (const [runId, card] of state.liveCards) {
    if (!live.some((r) => r.run_id === runId)) {
      clearInterval(card.timer);
      card.root.remove();
      state.liveCards.delete(runId);
    }
  }
  for (const run of live) {
    if (!state.liveCards.has(run.run_id)) {
      const card = liveCard(run);
      state.liveCards.set(run.run_id, card);
      list.append(card.root);
    }
    updateCard(state.liveCards.get(run.run_id), run.progress, run.state);
  }
}

function liveCard(run) {
  const field = (cls, label) => el("div", {className: "field"}, el("span", {className: "label", text: label}),
    el("span", {className: cls}));
  const root = el("div", {className: "live-run", dataset: {runId: run.run_id}},
    el("div", {className: "live-head"}, el("button", {className: "link", type: "button", text: run.run_id,
      on: {click: () => selectRun(run.run_id)}}), el("span", {className: "badge state-running", text: run.state})),
    el("div", {className: "bar"}, el("div", {className: "fill"})),
    el("div", {className: "fields"}, field("step", "step"), field("total", "of"), field("epoch", "epoch"),
      field("loss", "loss"), field("accuracy", "accuracy"), field("rate", "examples/s"), field("workers", "workers"),
      field("eta", "time left")),
    el("div", {className: "muted updated"}));
  const parts = Object.fromEntries(["step", "total", "epoch", "loss", "accuracy", "rate", "workers", "eta", "fill",
    "updated"].map((name) => [name, root.querySelector(`.${name}`)]));
  const card = {root, parts, progress: null, runState: run.state};
  card.timer = setInterval(() => pollProgress(run.run_id, card), 2000);
  pollProgress(run.run_id, card);
  return card;
}

async function pollProgress(runId, card) {
  try {
    const progress = await getJSON(`pipelines/${encodeURIComponent(DAG_ID)}/runs/${encodeURIComponent(runId)}/progress`);
    updateCard(card, progress, progress.state);
  } catch (error) {
    if (error.status !== 404) showError(error);
  }
}

function updateCard(card, progress, runState) {
  const {parts} = card;
  card.progress = progress || card.progress;
  const p = card.progress;
  card.root.querySelector(".badge").textContent = runState || card.runState;
  if (!p) {
    parts.updated.textContent = "waiting for the first training steps…";
    return;
  }
  parts.step.textContent = String(p.step);
  parts.total.textContent = String(p.total_steps);
  parts.epoch.textContent = `${p.epoch.toFixed(2)} / ${p.epochs}`;
  parts.loss.textContent = num(p.loss);
  parts.accuracy.textContent = num(p.accuracy);
  parts.rate.textContent = thousands(p.examples_per_sec);
  parts.workers.textContent = String(p.workers);
  parts.eta.textContent = p.finished ? "done" : (p.seconds_left === null ? "estimating…" : `~${duration(p.seconds_left)}`);
  parts.fill.style.width = `${Math.min(100, (100 * p.step) / p.total_steps)}%`;
  const age = (Date.now() - Date.parse(p.updated_at)) / 1000;
  parts.updated.textContent = `updated ${duration(Math.max(0, age))} ago · ${duration(p.elapsed_seconds)} training`;
}

// ---- charts
function niceTicks(low, high, count) {
  const raw = (high - low) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(low / step) * step; v <= high + step / 1e6; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function timeTicks(low, high) {
  const hour = 3600e3, day = 24 * hour;
  const step = [hour, 3 * hour, 6 * hour, 12 * hour, day, 2 * day, 7 * day, 14 * day, 30 * day, 91 * day]
    .find((s) => (high - low) / s <= 6) || 365 * day;
  const ticks = [];
  for (let t = Math.ceil(low / step) * step; t <= high; t += step) ticks.push(t);
  return {ticks, hourly: step < day};
}

function seriesColors(runs) {
  const names = [...new Set(runs.map((r) => r.series))].sort((a, b) =>
    (a === "scheduled" ? -1 : b === "scheduled" ? 1 : a.localeCompare(b, "en", {numeric: true})));
  return new Map(names.map((name, i) => [name, PALETTE[i % PALETTE.length]]));
}

function renderCharts(data, colors) {
  const section = document.getElementById("charts");
  const labels = new Map(data.runs.map((r) => [r.series, r.series_label]));
  const legend = el("div", {className: "legend"}, [...colors].map(([name, color]) =>
    el("span", {className: "key"}, el("i", {style: `background:${color}`}), labels.get(name) || name)),
  el("span", {className: "key"}, el("i", {className: "ring"}), "refused by the gate"),
  el("span", {className: "key"}, el("i", {className: "dash"}), "value threshold"));
  const grid = el("div", {className: "chart-grid"}, data.metrics.map((metric) => metricChart(data, metric, colors)));
  section.replaceChildren(el("h2", {text: "Metrics by data interval"}), legend,
    data.metrics.length ? grid : el("p", {className: "empty", text: "No evaluated runs yet: the charts appear once a run's evaluate task has scored its model."}));
}

function metricChart(data, metric, colors) {
  const W = 520, H = 230, L = 56, R = 14, T = 12, B = 30;
  const runs = data.runs.filter((r) => r.metrics && r.metrics[metric] !== undefined && r.data_interval_end);
  const box = el("figure", {className: "chart-box"}, el("figcaption", {},
    el("strong", {text: metric}), el("span", {className: "muted", text:
      data.directions[metric] === "lower_is_better" ? " lower is better" : " higher is better"})));
  if (!runs.length) {
    box.append(el("p", {className: "empty", text: "no evaluated runs yet"}));
    return box;
  }
  const bounds = data.thresholds[metric] || {};
  const xs = runs.map((r) => Date.parse(r.data_interval_end));
  const ys = [...runs.map((r) => r.metrics[metric]), ...["lower", "upper"].map((b) => bounds[b]).filter((v) => v != null)];
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  if (x0 === x1) { x0 -= 12 * 3600e3; x1 += 12 * 3600e3; }
  const pad = (x1 - x0) * 0.04;
  x0 -= pad; x1 += pad;
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const span = y1 - y0 || Math.abs(y1) * 0.05 || 0.01;
  y0 -= span * 0.12; y1 += span * 0.12;
  const x = (t) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
  const y = (v) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  const svg = el("svg:svg", {className: "chart", viewBox: `0 0 ${W} ${H}`, dataset: {metric}, role: "img",
    "aria-label": `${metric} by data interval`});
  for (const v of niceTicks(y0, y1, 5)) {
    svg.append(el("svg:line", {className: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v)}),
      el("svg:text", {className: "tick", x: L - 6, y: y(v) + 4, "text-anchor": "end", text: String(v)}));
  }
  const {ticks, hourly} = timeTicks(x0, x1);
  for (const t of ticks) {
    svg.append(el("svg:line", {className: "grid", x1: x(t), x2: x(t), y1: T, y2: H - B}),
      el("svg:text", {className: "tick", x: x(t), y: H - B + 16, "text-anchor": "middle",
        text: when(new Date(t).toISOString(), hourly).slice(5)}));
  }
  for (const bound of ["lower", "upper"]) {
    if (bounds[bound] == null) continue;
    svg.append(el("svg:line", {className: "threshold", dataset: {bound}, x1: L, x2: W - R, y1: y(bounds[bound]),
      y2: y(bounds[bound])}), el("svg:text", {className: "threshold-label", x: W - R - 4, y: y(bounds[bound]) - 4,
      "text-anchor": "end", text: `${bound} ${bounds[bound]}`}));
  }
  const bySeries = new Map();
  for (const run of runs) bySeries.set(run.series, [...(bySeries.get(run.series) || []), run]);
  for (const [series, members] of bySeries) {
    members.sort((a, b) => Date.parse(a.data_interval_end) - Date.parse(b.data_interval_end));
    const color = colors.get(series);
    if (members.length > 1) {
      svg.append(el("svg:polyline", {className: "series-line", stroke: color, points: members.map((r) =>
        `${x(Date.parse(r.data_interval_end))},${y(r.metrics[metric])}`).join(" ")}));
    }
    for (const run of members) svg.append(chartPoint(run, metric, color, x(Date.parse(run.data_interval_end)),
      y(run.metrics[metric])));
  }
  box.append(svg);
  return box;
}

function chartPoint(run, metric, color, cx, cy) {
  const verdict = run.blessed === true ? "blessed" : run.blessed === false ? "refused" : "unevaluated";
  const point = el("svg:circle", {className: `point ${verdict}${run.run_id === state.selected ? " selected" : ""}`,
    cx, cy, r: 5, fill: color, stroke: color,
    dataset: {runId: run.run_id}, on: {click: () => selectRun(run.run_id)}},
  el("svg:title", {text: [run.run_id, interval(run), `${metric} ${num(run.metrics[metric])}`,
    verdict === "blessed" ? "blessed" : verdict === "refused" ? "refused by the gate" : "not evaluated",
    run.export_version ? `version ${run.export_version}` : null].filter(Boolean).join("\n")}));
  return point;
}

// ---- runs table
function columns(data) {
  return [
    {key: "run_id", label: "Run", value: (r) => r.run_id, cell: runCell},
    {key: "run_type", label: "Type", value: (r) => r.series_label || "", cell: typeCell, cls: "type"},
    {key: "data_interval_end", label: "Data interval", value: (r) => r.data_interval_end || "", cell: (r) => interval(r)},
    {key: "overrides", label: "Overrides", value: (r) => overridesOf(r).join(" "), cell: overridesCell, cls: "overrides"},
    ...data.metrics.map((m) => ({key: `metric:${m}`, label: m, numeric: true, value: (r) => (r.metrics || {})[m] ?? null,
      cell: (r) => num((r.metrics || {})[m])})),
    {key: "blessed", label: "Gate", value: (r) => (r.blessed === null ? -1 : Number(r.blessed)), cell: gateCell, cls: "gate"},
    {key: "checks", label: "Checks", value: (r) => Math.min(...r.checks.map((c) => c.margin), Infinity), cell: checksCell},
    {key: "export_version", label: "Version", numeric: true, value: (r) => r.export_version, cell: (r) => r.export_version ?? "—", cls: "version"},
    {key: "duration_seconds", label: "Duration", numeric: true, value: (r) => r.duration_seconds, cell: (r) => duration(r.duration_seconds)},
    {key: "train_examples_per_sec", label: "Examples/s", numeric: true, value: (r) => r.train_examples_per_sec,
      cell: (r) => thousands(r.train_examples_per_sec)},
    {key: "state", label: "State", value: (r) => r.state || "", cell: (r) => el("span", {className: `badge state-${r.state || "unknown"}`, text: r.state || "unknown"})},
  ];
}

const runCell = (r) => el("span", {title: r.run_id, text: shortRunId(r.run_id)});
const typeCell = (r) => el("span", {className: `badge type-${r.run_type || "unknown"}`, title: r.series_label,
  text: r.run_type === "backfill" ? r.series : r.run_type || "unknown"});
const overridesCell = (r) => (overridesOf(r).length ? overridesOf(r).map((text) => el("span", {className: "chip", text})) : "—");

function gateCell(run) {
  if (run.blessed === null || run.blessed === undefined) return "—";
  return el("span", {}, el("span", {className: `badge ${run.blessed ? "good" : "bad"}`, text: run.blessed ? "blessed" : "refused"}),
    run.baseline ? el("div", {className: "muted small", text: `vs ${run.baseline.version}`}) : null);
}

function checksCell(run) {
  if (!run.checks.length) return run.gate ? el("span", {className: "muted", text: run.gate}) : "—";
  return run.checks.map((c) => el("div", {className: `check ${c.passed ? "pass" : "fail"}`,
    title: c.kind === "change" ? `baseline ${num(c.baseline)}, change ${signed(c.delta)}` : `value ${num(c.value)}`},
  `${c.metric} ${c.rule} `, el("span", {className: "margin", text: signed(c.margin)})));
}

function filteredRuns(data) {
  const {type, override, text} = state.filters;
  return data.runs.filter((r) => (!type || (r.run_type || "unknown") === type)
    && (!override || (override === "-" ? overridesOf(r).length === 0 : overridesOf(r).includes(override)))
    && (!text || r.run_id.toLowerCase().includes(text.toLowerCase())));
}

function sortedRuns(runs, cols) {
  const column = cols.find((c) => c.key === state.sort.key) || cols[2];
  const sign = state.sort.desc ? -1 : 1;
  return [...runs].sort((a, b) => {
    const [va, vb] = [column.value(a), column.value(b)];
    if (va === vb) return 0;
    if (va === null || va === undefined) return 1;
    if (vb === null || vb === undefined) return -1;
    return (va < vb ? -1 : 1) * sign;
  });
}

function renderFilters(data) {
  const types = [...new Set(data.runs.map((r) => r.run_type || "unknown"))].sort();
  const overrides = [...new Set(data.runs.flatMap(overridesOf))].sort();
  const select = (id, label, options, key) => el("label", {}, `${label} `, el("select", {id, on: {change: (e) => {
    state.filters[key] = e.target.value; renderRuns(data);
  }}}, options.map(([value, text]) => el("option", {value, text, selected: state.filters[key] === value}))));
  document.getElementById("filters").replaceChildren(
    select("filter-type", "Type", [["", "all"], ...types.map((t) => [t, t])], "type"),
    select("filter-override", "Override", [["", "all"], ["-", "no overrides"], ...overrides.map((o) => [o, o])], "override"),
    el("label", {}, "Run ", el("input", {id: "filter-text", type: "search", placeholder: "run id contains…",
      value: state.filters.text, on: {input: (e) => { state.filters.text = e.target.value; renderRuns(data); }}})));
}

function renderRuns(data) {
  const cols = columns(data);
  const head = el("tr", {}, cols.map((c) => el("th", {dataset: {sort: c.key}, className: c.numeric ? "num" : null,
    "aria-sort": state.sort.key === c.key ? (state.sort.desc ? "descending" : "ascending") : null,
    on: {click: () => { state.sort = {key: c.key, desc: state.sort.key === c.key ? !state.sort.desc : false}; renderRuns(data); }}},
  c.label, state.sort.key === c.key ? (state.sort.desc ? " ▼" : " ▲") : "")));
  const runs = sortedRuns(filteredRuns(data), cols);
  const body = el("tbody", {}, runs.flatMap((run) => {
    const row = el("tr", {className: `run${run.run_id === state.selected ? " selected" : ""}`,
      dataset: {runId: run.run_id, runType: run.run_type || "unknown"}, on: {click: () => toggleRun(run.run_id)}},
    cols.map((c) => el("td", {className: [c.cls, c.numeric ? "num" : null].filter(Boolean).join(" ") || null}, c.cell(run))));
    return state.open.has(run.run_id) ? [row, detailsRow(run, cols.length)] : [row];
  }));
  const table = runs.length ? el("table", {}, el("thead", {}, head), body)
    : el("p", {className: "empty", text: data.runs.length ? "No run matches these filters."
      : "No runs yet: trigger the DAG or let its schedule run; each run appears here once it starts."});
  document.getElementById("runs-table").replaceChildren(table);
}

function detailsRow(run, span) {
  const baseline = run.baseline ? el("p", {}, `Baseline version ${run.baseline.version}: `,
    Object.entries(run.baseline.metrics).map(([k, v]) => `${k} ${num(v)}` +
      (run.metrics && run.metrics[k] !== undefined ? ` → ${num(run.metrics[k])} (${signed(run.metrics[k] - v)})` : ""))
      .join(", ")) : el("p", {className: "muted", text: "No baseline compared."});
  return el("tr", {className: "details"}, el("td", {colspan: span},
    el("div", {className: "details-grid"},
      el("div", {}, el("h3", {text: "Gate report"}), run.report.length
        ? el("pre", {text: run.report.join("\n")}) : el("p", {className: "muted", text: "Not evaluated yet."}),
      run.failures.length ? el("ul", {className: "failures"}, run.failures.map((f) => el("li", {text: f}))) : null),
      el("div", {}, el("h3", {text: "Run"}), baseline,
        el("p", {text: `Final step ${run.final_step ?? "—"} · ${thousands(run.train_examples_per_sec)} examples/s · ` +
          `started ${when(run.started_at, true)} · ${duration(run.duration_seconds)}`}),
        el("p", {className: "muted mono", text: run.run_id})))));
}

function toggleRun(runId) {
  if (state.open.has(runId)) state.open.delete(runId); else state.open.add(runId);
  state.selected = runId;
  renderRuns(state.data);
  markSelectedPoints();
}

function selectRun(runId) {
  state.selected = runId;
  state.open.add(runId);
  state.filters = {type: "", override: "", text: ""};
  renderFilters(state.data);
  renderRuns(state.data);
  markSelectedPoints();
  document.querySelector(`tr.run[data-run-id="${CSS.escape(runId)}"]`)?.scrollIntoView({block: "center"});
}

function markSelectedPoints() {
  for (const point of document.querySelectorAll("#charts .point")) {
    point.classList.toggle("selected", point.dataset.runId === state.selected);
  }
}

// ---- versions
function renderVersions(data) {
  const section = document.getElementById("versions");
  const rows = data.versions.map((v) => el("tr", {className: `version${String(v.version) === state.version ? " selected" : ""}`,
    dataset: {version: String(v.version)}},
  el("td", {className: "num"}, String(v.version), v.baseline ? el("span", {className: "baseline-badge", text: "current baseline"}) : null),
  el("td", {}, v.run_id ? el("button", {className: "link", type: "button", title: v.run_id, text: shortRunId(v.run_id),
    on: {click: () => selectRun(v.run_id)}}) : "—"),
  el("td", {text: interval(v)}),
  el("td", {text: Object.entries(v.metrics || {}).map(([k, m]) => `${k} ${num(m)}`).join(" · ") || "—"}),
  el("td", {className: "muted", text: v.gate || "—"})));
  section.replaceChildren(el("h2", {text: "Published versions"}), rows.length
    ? el("table", {}, el("thead", {}, el("tr", {}, ["Version", "Run", "Data interval", "Metrics", "Gate"]
      .map((h) => el("th", {text: h})))), el("tbody", {}, rows))
    : el("p", {className: "empty", text: "Nothing published yet: export publishes a version once the gate blesses a model."}));
}

// ---- loading
function render(data) {
  state.data = data;
  const colors = seriesColors(data.runs);
  renderLive(data.runs);
  renderCharts(data, colors);
  renderFilters(data);
  renderRuns(data);
  renderVersions(data);
  for (const id of ["charts", "runs", "versions"]) document.getElementById(id).hidden = false;
  if (state.scrollPending) {
    state.scrollPending = false;
    const target = state.selected ? `tr.run[data-run-id="${CSS.escape(state.selected)}"]`
      : `tr.version[data-version="${CSS.escape(state.version)}"]`;
    document.querySelector(target)?.scrollIntoView({block: "center"});
  }
}

async function refresh() {
  try {
    render(await getJSON(`pipelines/${encodeURIComponent(DAG_ID)}`));
    showError(null);
  } catch (error) {
    showError(error);
  }
  const busy = state.data && state.data.runs.some((r) => LIVE_STATES.has(r.state));
  setTimeout(refresh, busy ? 10000 : 60000);
}

async function main() {
  const mode = localStorage.getItem("theme");  // Airflow's own setting: light, dark or system
  document.documentElement.dataset.theme = mode === "dark" || mode === "light" ? mode
    : (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  let pipelines = [];
  try {
    pipelines = await getJSON("pipelines");
  } catch (error) {
    showError(error);
  }
  renderTop(pipelines, null);
  if (!DAG_ID) {
    renderIndex(pipelines);
    return;
  }
  await refresh();
  if (state.data) renderTop(pipelines, state.data);
}

main();
