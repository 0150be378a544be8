// The runs table: a row per run, sortable by any column, filtered by type, override and run id; a row clicked opens
// its details (the gate's report, the training curve, the data gate, the baseline, the run's facts).

import {overridesChips, setStateBadge, typeBadge} from "./badges.js";
import {markSelectedPoints} from "./charts.js";
import {curveView} from "./curves.js";
import {$, classes, el} from "./dom.js";
import {count, duration, fixed, interval, shortRunId, timestamp} from "./format.js";
import {baselineTable, dataCell, dataGateView, gateCell} from "./gate.js";
import {filterRuns, gateOrder, overridesOf, sortRuns, startOf} from "./records.js";
import {view} from "./state.js";

const NO_FILTERS = {type: "", override: "", text: ""};
let sort = {key: "interval", desc: true};
let filters = {...NO_FILTERS};

function columns(data) {
  return [
    {key: "run", label: "Run", value: (r) => `${shortRunId(r.run_id)} ${r.run_id}`, cell: runCell}, // as shown
    {key: "type", label: "Type", value: (r) => `${r.run_type || "~"} ${r.series}`, cell: typeBadge, class: "type"},
    {
      key: "interval",
      label: "Data interval",
      value: (r) => Date.parse(r.data_interval_end) || null,
      class: "interval",
      cell: (r) =>
        el("span", {
          title: `${timestamp(r.data_interval_start)} → ${timestamp(r.data_interval_end)}`,
          text: interval(r),
        }),
    },
    {
      key: "overrides",
      label: "Overrides",
      value: (r) => overridesOf(r).join(" "),
      cell: (r) => overridesChips(r, "—"),
      class: "overrides",
    },
    ...data.metrics.map((m) => ({
      key: `metric:${m}`,
      label: m,
      numeric: true,
      value: (r) => r.metrics?.[m] ?? null,
      cell: (r) => metricCell(r, m),
      class: "metric",
    })),
    {key: "data", label: "Data", value: (r) => r.data_decision ?? null, cell: dataCell, class: "data"},
    {key: "gate", label: "Gate and checks", value: gateOrder, cell: gateCell, class: "gate"},
    {
      key: "version",
      label: "Version",
      numeric: true,
      value: (r) => r.export_version,
      cell: (r) => r.export_version ?? "—",
      class: "version",
    },
    {
      key: "duration",
      label: "Duration",
      numeric: true,
      value: (r) => r.duration_seconds,
      cell: (r) => duration(r.duration_seconds),
      class: "duration",
    },
    {
      key: "rate",
      label: "Examples/s",
      numeric: true,
      value: (r) => r.train_examples_per_sec,
      cell: (r) => count(r.train_examples_per_sec),
    },
    {
      key: "state",
      label: "State",
      value: (r) => r.state,
      cell: (r) => setStateBadge(el("span"), r.state),
      class: "state",
    },
  ];
}

const runCell = (r) => [
  el("span", {class: "caret", "aria-hidden": "true", text: view.open.has(r.run_id) ? "▾" : "▸"}),
  el("span", {class: "run-id", title: r.run_id, text: shortRunId(r.run_id)}),
];

function metricCell(run, metric) {
  const failed = run.checks.some((c) => c.metric === metric && !c.passed);
  return el("span", {class: failed ? "bad" : null, text: fixed(run.metrics?.[metric])});
}

const filteredRuns = () => filterRuns(view.data.runs, filters);

/** The runs section's parts that stay: its heading, the filters, the table's frame. */
export function buildRunsSection() {
  const select = (id, label, key) =>
    el(
      "label",
      {},
      `${label} `,
      el("select", {
        id,
        onchange: (e) => {
          filters[key] = e.target.value;
          renderRuns();
        },
      }),
    );
  $("runs").append(
    el("h2", {}, "Runs ", el("span", {class: "count muted"})),
    el(
      "div",
      {class: "filters"},
      select("filter-type", "Type", "type"),
      select("filter-override", "Overrides", "override"),
      el("input", {
        id: "filter-run",
        type: "search",
        placeholder: "Filter by run id…",
        "aria-label": "Filter by run id",
        oninput: (e) => {
          filters.text = e.target.value;
          renderRuns();
        },
      }),
      el("button", {type: "button", class: "link clear", text: "clear filters", hidden: true, onclick: clearFilters}),
    ),
    el(
      "div",
      {class: "scroll-frame"},
      el("div", {class: "scroll", onscroll: markMoreRight}, el("table", {id: "runs-table"}, el("thead"), el("tbody"))),
    ),
    el("p", {class: "empty", hidden: true}),
  );
}

function setOptions(select, options, key) {
  if (!options.some(([value]) => value === filters[key])) filters[key] = "";
  select.replaceChildren(
    ...options.map(([value, text]) => el("option", {value, text, selected: value === filters[key]})),
  );
}

/** The filters' options: the run types and the overrides the runs hold. */
export function renderFilterOptions(data) {
  const types = [...new Set(data.runs.map((r) => r.run_type || "unknown"))].sort();
  const overrides = [...new Set(data.runs.flatMap(overridesOf))].sort();
  setOptions(
    $("filter-type"),
    [["", "all types"], ...types.map((t) => [t, t === "unknown" ? "not in Airflow" : t.replace("_", " ")])],
    "type",
  );
  setOptions($("filter-override"), [["", "all"], ["-", "no overrides"], ...overrides.map((o) => [o, o])], "override");
}

function clearFilters() {
  filters = {...NO_FILTERS};
  $("filter-type").value = $("filter-override").value = $("filter-run").value = "";
  renderRuns();
}

/** The table of the overview's runs (view.data), as sorted and filtered, with the open runs' details. */
export function renderRuns() {
  const data = view.data;
  const cols = columns(data);
  const column = cols.find((c) => c.key === sort.key) || cols[2];
  const runs = sortRuns(filteredRuns(), column.value, sort.desc);
  const section = $("runs");
  const focused = document.activeElement?.closest("th")?.dataset.sort;
  section.hidden = false;
  section.querySelector("h2 .count").textContent =
    runs.length === data.runs.length ? `${runs.length}` : `${runs.length} of ${data.runs.length}`;
  section.querySelector(".clear").hidden = !(filters.type || filters.override || filters.text);
  section.querySelector("thead").replaceChildren(el("tr", {}, cols.map(sortHeader)));
  section.querySelector("tbody").replaceChildren(
    ...runs.flatMap((run) => {
      const row = el(
        "tr",
        {
          class: classes("run", run.run_id === view.selected && "selected"),
          data: {runId: run.run_id, runType: run.run_type || "unknown"},
          "aria-expanded": String(view.open.has(run.run_id)),
          onclick: () => getSelection().isCollapsed && toggleRun(run.run_id),
        }, // not when selecting text to copy
        cols.map((c) => el("td", {class: classes(c.class, c.numeric && "num")}, c.cell(run))),
      );
      return view.open.has(run.run_id) ? [row, detailsRow(run, cols.length)] : [row];
    }),
  );
  if (focused) section.querySelector(`th[data-sort="${CSS.escape(focused)}"] button`)?.focus();
  section.querySelector(".scroll").hidden = runs.length === 0;
  section.querySelector(".filters").hidden = data.runs.length === 0;
  const empty = section.querySelector(".empty");
  empty.hidden = runs.length > 0;
  empty.textContent = data.runs.length
    ? "No run matches these filters."
    : "No runs yet: trigger the DAG or wait for its schedule; each run appears here as soon as it starts.";
  markMoreRight();
}

/** A shadow on the runs table's right edge while columns are hidden there (it scrolls sideways when too narrow). */
export function markMoreRight() {
  const scroll = $("runs").querySelector(".scroll");
  scroll.parentNode.classList.toggle("more-right", scroll.scrollLeft + scroll.clientWidth < scroll.scrollWidth - 1);
}

function sortHeader(column) {
  const active = sort.key === column.key;
  return el(
    "th",
    {
      data: {sort: column.key},
      class: classes(column.numeric && "num", active && "sorted"),
      "aria-sort": active ? (sort.desc ? "descending" : "ascending") : null,
      onclick: () => {
        sort = {key: column.key, desc: active ? !sort.desc : false};
        renderRuns();
      },
    },
    el(
      "button",
      {type: "button", class: "sort", title: `Sort by ${column.label}`},
      column.label,
      el("span", {class: "arrow", "aria-hidden": "true", text: active ? (sort.desc ? "▼" : "▲") : ""}),
    ),
  );
}

const WIDE_BLOCKS = new Set(["Training curve", "Data gate"]);

function detailsRow(run, span) {
  const block = (title, aside, ...content) =>
    el(
      "div",
      {class: classes("block", WIDE_BLOCKS.has(title) && "wide")},
      el("h3", {}, title, aside ? el("span", {class: "aside", text: aside}) : null),
      ...content,
    );
  return el(
    "tr",
    {class: "details", data: {runId: run.run_id}},
    el(
      "td",
      {colspan: span},
      el(
        "div",
        {class: "details-grid"},
        block(
          "Gate report",
          run.gate,
          run.report.length
            ? el("pre", {class: "report", text: run.report.join("\n")})
            : el("p", {class: "muted", text: "Not evaluated yet."}),
          run.failures.length
            ? el(
                "ul",
                {class: "failures"},
                run.failures.map((f) => el("li", {text: f})),
              )
            : null,
        ),
        block(
          "Training curve",
          startOf(run.parent_version, run.cold_start),
          el("div", {class: "curves", data: {runId: run.run_id}}, curveView(run)),
        ),
        block("Data gate", run.data_decision, dataGateView(run, renderRuns)),
        block("Baseline", run.baseline && `version ${run.baseline.version}`, baselineTable(run, view.data.directions)),
        block("Run", null, runFacts(run)),
      ),
    ),
  );
}

function runFacts(run) {
  const facts = [
    ["run id", el("span", {class: "mono", text: run.run_id})],
    ["series", run.series_label],
    ["started", timestamp(run.started_at)],
    ["ended", timestamp(run.ended_at)],
    ["duration", duration(run.duration_seconds)],
    ["final step", run.final_step ?? "—"],
    ["examples/s", count(run.train_examples_per_sec)],
    ["version", run.export_version ?? "none published"],
    ["overrides", overridesChips(run, "none")],
  ];
  return el(
    "dl",
    {class: "facts"},
    facts.map(([term, value]) => [el("dt", {text: term}), el("dd", {}, value ?? "—")]),
  );
}

function toggleRun(runId) {
  const opening = !view.open.has(runId);
  if (opening) view.open.add(runId);
  else view.open.delete(runId);
  view.selected = opening ? runId : view.selected === runId ? null : view.selected;
  renderRuns();
  markSelectedPoints();
}

/** Select a run (from a chart point, a live card, a version): highlighted, details open, scrolled to. */
export function selectRun(runId) {
  view.selected = runId;
  view.open.add(runId);
  if (!filteredRuns().some((r) => r.run_id === runId)) clearFilters();
  renderRuns();
  markSelectedPoints();
  document
    .querySelector(`tr.run[data-run-id="${CSS.escape(runId)}"]`)
    ?.scrollIntoView({block: "center", behavior: "smooth"});
}
