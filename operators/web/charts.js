// The charts: one per metric, x = data interval end, a line per series, a point per run (click: select it).

import {$, el, svg} from "./dom.js";
import {fixed, interval, isNum} from "./format.js";
import {verdictOf} from "./records.js";
import {DAY, extent, gateRules, seriesColors, timeTicks, valueAxis} from "./scales.js";
import {view} from "./state.js";

let drawnKey = ""; // what the drawn charts show: unchanged, they are kept

/** Horizontal grid lines at the axis's ticks, labelled on the left. */
export const yGrid = (axis, y, left, right) =>
  axis.ticks.flatMap((v) => [
    svg("line", {class: "grid", x1: left, x2: right, y1: y(v), y2: y(v)}),
    svg("text", {class: "tick", x: left - 8, y: y(v) + 4, "text-anchor": "end", text: v.toFixed(axis.digits)}),
  ]);

/** A dashed horizontal line across the plot, labelled at its right end, above or below it. */
export const guide = (cls, label, at, left, right, above, attrs = {}) => [
  svg("line", {class: cls, x1: left, x2: right, y1: at, y2: at, ...attrs}),
  svg("text", {class: `${cls}-label`, x: right - 2, y: at + (above ? -5 : 13), "text-anchor": "end", text: label}),
];

/** The charts of the overview's runs; a point clicked (or Enter on it) calls onSelect(run id). */
export function renderCharts(data, onSelect) {
  const section = $("charts");
  section.hidden = false;
  const key = JSON.stringify([
    section.clientWidth,
    data.metrics,
    data.thresholds,
    data.change_thresholds,
    data.runs.map((r) => [
      r.run_id,
      r.series,
      r.series_label,
      r.data_interval_start,
      r.data_interval_end,
      r.metrics,
      r.blessed,
      r.baseline?.version,
      r.export_version,
    ]),
  ]);
  if (key === drawnKey) return; // unchanged: keep the drawn charts (and any open tooltip)
  drawnKey = key;
  const plotted = data.runs.filter((r) => r.metrics && r.data_interval_end);
  const colors = seriesColors(plotted);
  const head = el("h2", {text: "Metrics by data interval"});
  if (!plotted.length) {
    section.replaceChildren(
      head,
      el("p", {
        class: "empty",
        text: "No evaluated runs yet: a chart per metric appears once a run's evaluate task has scored its model.",
      }),
    );
    return;
  }
  const figures = data.metrics.map((metric) =>
    el(
      "figure",
      {class: "chart-box"},
      el(
        "figcaption",
        {},
        el("strong", {text: metric}),
        el("span", {
          class: "muted",
          text: [data.directions?.[metric]?.replaceAll("_", " "), ...gateRules(data, metric).map((r) => `gate ${r}`)]
            .filter(Boolean)
            .join(" · "),
        }),
      ),
    ),
  );
  const grid = el("div", {class: "chart-grid"}, figures);
  section.replaceChildren(
    head,
    el("p", {class: "muted note", text: "x: end of each run's data interval (UTC). Click a point to see its run."}),
    legend(plotted, colors),
    grid,
  );
  data.metrics.forEach((metric, i) => {
    // figures in place first: each chart is drawn at its figure's width
    const runs = plotted.filter((r) => isNum(r.metrics[metric]));
    figures[i].append(
      runs.length
        ? chart({data, metric, runs, colors, onSelect}, figures[i].clientWidth - 24)
        : el("p", {class: "empty", text: "no evaluated runs yet"}),
    );
  });
  markSelectedPoints();
}

function legend(runs, colors) {
  const labels = new Map(runs.map((r) => [r.series, r.series_label || r.series]));
  const key = (marker, text) =>
    el("span", {class: "key"}, svg("svg", {width: 22, height: 12, "aria-hidden": "true"}, marker), text);
  return el(
    "div",
    {class: "legend"},
    [...colors].map(([series, style]) =>
      key(
        [
          svg("line", {class: "series-line", x1: 1, x2: 21, y1: 6, y2: 6, style}),
          svg("circle", {class: "marker blessed", cx: 11, cy: 6, r: 3.5, style}),
        ],
        labels.get(series),
      ),
    ),
    el("span", {class: "sep"}),
    key(svg("circle", {class: "marker blessed", cx: 11, cy: 6, r: 4, style: {"--c": "var(--fg)"}}), "blessed"),
    key(refusedMarker(11, 6, 4.5, "marker"), "refused by the gate"),
    key(svg("circle", {class: "marker unevaluated", cx: 11, cy: 6, r: 4}), "not evaluated"),
    key(svg("line", {class: "threshold", x1: 1, x2: 21, y1: 6, y2: 6}), "gate threshold"),
  );
}

function refusedMarker(cx, cy, r, className, attrs = {}) {
  const arm = r * 0.55;
  return [
    svg("circle", {class: `${className} refused`, cx, cy, r, ...attrs}),
    svg("path", {
      class: "cross",
      d: `M${cx - arm} ${cy - arm}L${cx + arm} ${cy + arm}M${cx + arm} ${cy - arm}L${cx - arm} ${cy + arm}`,
    }),
  ];
}

/** One metric's chart of its runs ({data, metric, runs, colors, onSelect}) at a width. */
function chart(plot, width) {
  const {data, metric, runs, colors} = plot;
  const [W, H, L, R, T, B] = [Math.max(320, width), 240, 54, 16, 12, 28];
  const bounds = data.thresholds?.[metric] || {};
  const limits = [
    ["lower", bounds.lower],
    ["upper", bounds.upper],
  ].filter(([, v]) => isNum(v));
  const time = (r) => Date.parse(r.data_interval_end);
  const [x0, x1] = extent(runs.map(time), DAY);
  const yAxis = valueAxis([...runs.map((r) => r.metrics[metric]), ...limits.map(([, v]) => v)], 5);
  const x = (t) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
  const y = (v) => T + (1 - (v - yAxis.min) / (yAxis.max - yAxis.min)) * (H - T - B);
  const root = svg("svg", {
    class: "chart",
    width: W,
    height: H,
    viewBox: `0 0 ${W} ${H}`,
    data: {metric},
    role: "img",
    "aria-label": `${metric} by data interval`,
  });
  root.append(...yGrid(yAxis, y, L, W - R));
  const xAxis = timeTicks(x0, x1, Math.max(2, Math.floor((W - L - R) / 90)));
  for (const t of xAxis.ticks) {
    root.append(
      svg("line", {class: "axis", x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4}),
      svg("text", {class: "tick", x: x(t), y: H - B + 17, "text-anchor": "middle", text: xAxis.label(t)}),
    );
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
  for (const run of runs) root.append(...chartPoint(run, plot, x(time(run)), y(run.metrics[metric])));
  return root;
}

function chartPoint(run, {metric, colors, onSelect}, cx, cy) {
  const verdict = verdictOf(run);
  const title = [
    run.run_id,
    `data interval ${interval(run)}`,
    `${metric} ${fixed(run.metrics[metric])}`,
    {blessed: "blessed by the gate", refused: "refused by the gate", unevaluated: "not evaluated"}[verdict] +
      (run.baseline ? ` (vs v${run.baseline.version})` : ""),
    run.export_version ? `version ${run.export_version}` : "no version published",
  ].join("\n");
  const attrs = {
    cx,
    cy,
    r: 5,
    tabindex: 0,
    role: "button",
    "aria-label": `${run.run_id}: ${metric} ${fixed(run.metrics[metric])}`,
    data: {runId: run.run_id},
    style: colors.get(run.series),
    onclick: () => onSelect(run.run_id),
    onkeydown: (e) => e.key === "Enter" && onSelect(run.run_id),
  };
  const [point, ...rest] =
    verdict === "refused"
      ? refusedMarker(cx, cy, 5.5, "point", attrs)
      : [svg("circle", {class: `point ${verdict}`, ...attrs})];
  point.append(svg("title", {text: title}));
  return [point, ...rest];
}

/** The selected run's points marked in every chart. */
export function markSelectedPoints() {
  for (const point of document.querySelectorAll("#charts .point")) {
    point.classList.toggle("selected", point.dataset.runId === view.selected);
  }
}
