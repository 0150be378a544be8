// Live training progress: a card per queued or running run, polled while there are any.

import {getRunRecord, setError} from "./api.js";
import {overridesChips, setStateBadge, typeBadge} from "./badges.js";
import {loadCurve} from "./curves.js";
import {$, el} from "./dom.js";
import {ago, count, duration, fixed, isNum, shortRunId} from "./format.js";
import {LIVE_STATES} from "./records.js";
import {view} from "./state.js";

const POLL_MS = 2000;
const cards = new Map(); // run id → live card {root, parts, progress}
let polling = false;

/** The cards of the live runs; a card's run id selects it (onSelect), a run that ended calls onEnded. */
export function renderLive(runs, {onSelect, onEnded}) {
  const live = runs.filter((r) => LIVE_STATES.has(r.state));
  const section = $("live");
  section.hidden = live.length === 0;
  if (!section.firstChild) section.append(el("h2", {text: "Training now"}), el("div", {class: "cards"}));
  const ids = new Set(live.map((r) => r.run_id));
  for (const [runId, card] of cards) {
    if (!ids.has(runId)) {
      card.root.remove();
      cards.delete(runId);
    }
  }
  for (const run of live) {
    if (!cards.has(run.run_id)) {
      cards.set(run.run_id, liveCard(run, onSelect));
      section.querySelector(".cards").append(cards.get(run.run_id).root);
    }
    const card = cards.get(run.run_id);
    setStateBadge(card.parts.state, run.state);
    if (run.progress && !card.progress) showProgress(card, run.progress);
  }
  if (live.length && !polling) pollProgress(onEnded);
}

function liveCard(run, onSelect) {
  const parts = {};
  const part = (name, tag = "span", attrs = {}) => (parts[name] = el(tag, {class: name, text: "—", ...attrs}));
  const stat = (label, name) => el("div", {class: "stat"}, el("span", {class: "label", text: label}), part(name));
  const root = el(
    "div",
    {class: "live-run waiting", data: {runId: run.run_id}},
    el(
      "div",
      {class: "live-head"},
      el("button", {
        type: "button",
        class: "link run-link",
        title: run.run_id,
        text: shortRunId(run.run_id),
        onclick: () => onSelect(run.run_id),
      }),
      typeBadge(run),
      part("state", "span", {class: "badge"}),
      overridesChips(run, null),
      part("updated", "span", {class: "updated muted", text: ""}),
    ),
    el("p", {class: "waiting-note", text: "waiting for the first training steps"}),
    el(
      "div",
      {class: "progress"},
      el("span", {class: "steps"}, part("step"), " / ", part("total-steps"), " steps"),
      el(
        "div",
        {class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100},
        part("fill", "div", {text: ""}),
      ),
      part("percent"),
      part("eta"),
    ),
    el(
      "div",
      {class: "stats"},
      stat("epoch", "epoch"),
      stat("loss", "loss"),
      part("metrics", "span", {text: ""}),
      stat("examples/s", "rate"),
      stat("workers", "workers"),
    ),
  );
  return {root, parts, progress: null};
}

function showProgress(card, p) {
  const {parts} = card;
  const r = p.record; // the progress record as the train stage wrote it
  const percent = r.total_steps ? Math.min(100, (100 * r.step) / r.total_steps) : 0;
  card.progress = p;
  card.root.classList.remove("waiting");
  parts.step.textContent = String(r.step);
  parts["total-steps"].textContent = String(r.total_steps);
  parts.fill.style.width = `${percent}%`;
  parts.fill.parentNode.setAttribute("aria-valuenow", percent.toFixed(0));
  parts.percent.textContent = `${Math.floor(percent)} %`;
  parts.eta.textContent = p.finished
    ? "training finished"
    : isNum(p.seconds_left)
      ? `≈ ${duration(p.seconds_left)} left`
      : "estimating time left…";
  parts.epoch.textContent = `${fixed(r.epoch, 2)} / ${r.epochs}`;
  parts.loss.textContent = fixed(r.loss);
  parts.metrics.replaceChildren(
    ...Object.entries(r.metrics || {}).map(([name, value]) =>
      el(
        "div",
        {class: "stat", data: {metric: name}},
        el("span", {class: "label", text: name}),
        el("span", {text: fixed(value)}),
      ),
    ),
  );
  parts.rate.textContent = count(r.examples_per_sec);
  parts.workers.textContent = String(r.workers);
  if (p.state) setStateBadge(parts.state, p.state);
}

/** One poll of every live card's progress; a run that left queued/running calls onEnded (the overview is then
 * brought up to date). */
async function pollProgress(onEnded) {
  const polled = [...cards];
  polling = polled.length > 0;
  if (!polling) return;
  const curves = polled.filter(([runId]) => view.open.has(runId)).map(([runId]) => loadCurve(runId)); // shown ones
  const states = await Promise.all(polled.map(([runId, card]) => pollCard(runId, card)));
  await Promise.all(curves);
  if (states.some((s) => s && !LIVE_STATES.has(s))) onEnded();
  setTimeout(() => pollProgress(onEnded), POLL_MS);
}

async function pollCard(runId, card) {
  try {
    const progress = await getRunRecord(runId, "progress");
    showProgress(card, progress);
    setError("progress", null);
    return progress.state;
  } catch (error) {
    setError("progress", error.status === 404 ? null : error);
    return null;
  } finally {
    const p = card.progress;
    card.parts.updated.textContent = p
      ? `updated ${ago(p.written_at)} · training for ${duration(p.record.elapsed_seconds)}`
      : "";
  }
}
