// A run's training curve: the loss and each train metric by step, the parent's final values marked (a warm start).

import {getRunRecord, setError} from "./api.js";
import {guide, yGrid} from "./charts.js";
import {el, svg} from "./dom.js";
import {count, fixed, isNum} from "./format.js";
import {curveMetrics, LIVE_STATES} from "./records.js";
import {niceTicks, valueAxis} from "./scales.js";
import {view} from "./state.js";

const curves = new Map(); // run id → {curve, live}: its training curve (null: none yet), fetched while it was live
const loading = new Set(); // run ids whose curve is being fetched

/** The run's curve charts, or what stands in for them (fetched when not yet, and once more after it ended). */
export function curveView(run) {
  const found = curves.get(run.run_id);
  if (!found || (found.live && !LIVE_STATES.has(run.state))) loadCurve(run.run_id); // once more after it ended
  if (!found) return el("p", {class: "muted", text: "Loading…"});
  if (!found.curve) {
    return el("p", {
      class: "muted",
      text: LIVE_STATES.has(run.state)
        ? "No training steps recorded yet."
        : "No training curve: the run did not train, or trained before curves were recorded.",
    });
  }
  const {points, parent_final: parent, parent_version: version} = found.curve;
  return curveMetrics(points).map((metric) => curveChart(points, metric, version, parent?.[metric]));
}

/** Fetch a run's curve and redraw it in place (its details may be open); null when it has none yet. */
export async function loadCurve(runId) {
  if (loading.has(runId)) return;
  loading.add(runId);
  const run = () => view.data.runs.find((r) => r.run_id === runId);
  const live = LIVE_STATES.has(run()?.state);
  try {
    const curve = await getRunRecord(runId, "curve");
    curves.set(runId, {curve, live});
    setError("curve", null);
  } catch (error) {
    if (error.status === 404) curves.set(runId, {curve: null, live});
    else setError("curve", error);
  } finally {
    loading.delete(runId);
  }
  const box = document.querySelector(`.curves[data-run-id="${CSS.escape(runId)}"]`);
  if (box && run() && curves.has(runId)) box.replaceChildren(...[curveView(run())].flat().filter(Boolean));
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
  const root = svg(
    "svg",
    {
      class: "chart curve-chart",
      viewBox: `0 0 ${W} ${H}`,
      role: "img",
      data: {metric, points: shown.length},
      "aria-label": `training ${metric} by step`,
    },
    yGrid(yAxis, y, L, W - R),
    xAxis.ticks.map((s) => [
      svg("line", {class: "axis", x1: x(s), x2: x(s), y1: H - B, y2: H - B + 4}),
      svg("text", {class: "tick", x: x(s), y: H - B + 17, "text-anchor": "middle", text: count(s)}),
    ]),
    svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}),
    isNum(parentFinal)
      ? guide(
          "parent-final",
          `parent v${parentVersion} final ${fixed(parentFinal)}`,
          y(parentFinal),
          L,
          W - R,
          last[metric] < parentFinal,
        )
      : null, // labelled on the side the curve ends away from
    svg("path", {
      class: "curve-line",
      d: `M${shown.map((p) => `${x(p.step).toFixed(1)} ${y(p[metric]).toFixed(1)}`).join("L")}`,
    }),
    svg(
      "circle",
      {class: "curve-end", cx: x(last.step), cy: y(last[metric]), r: 3.5},
      svg("title", {text: `step ${count(last.step)}: ${metric} ${fixed(last[metric])}`}),
    ),
  );
  return el(
    "figure",
    {class: "curve-box"},
    el(
      "figcaption",
      {},
      el("strong", {text: `training ${metric}`}),
      el("span", {class: "muted", text: ` at step ${count(last.step)}: ${fixed(last[metric])}`}),
    ),
    root,
  );
}
