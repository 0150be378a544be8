// A run's badges and chips, in the runs table and on the live cards: its type, state and overrides.

import {el} from "./dom.js";
import {overridesOf} from "./records.js";

export function typeBadge(run) {
  const type = run.run_type || "unknown";
  return el("span", {
    class: `badge type type-${type}`,
    title: run.series_label || null,
    text: type === "backfill" ? run.series : type === "unknown" ? "not in Airflow" : type.replace("_", " "),
  });
}

export function setStateBadge(badge, runState) {
  badge.className = `badge state state-${runState || "none"}`;
  badge.textContent = runState || "not in Airflow";
  return badge;
}

/** The run's overrides as chips; none (a text, or null) without any. */
export function overridesChips(run, none) {
  // "training.<wbr>epochs=<wbr>8": where a chip may wrap in a narrow column
  const chips = overridesOf(run).map((text) =>
    el(
      "span",
      {class: "chip"},
      text.split(/(?<=[.=])/).flatMap((part, i) => (i ? [el("wbr"), part] : part)),
    ),
  );
  return chips.length ? el("span", {class: "chips"}, chips) : none;
}
