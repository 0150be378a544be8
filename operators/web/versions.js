// The published versions: a row per version (the current baseline and withdrawn ones marked), a version clicked
// shows its lineage; ?version= selects one.

import {$, classes, el} from "./dom.js";
import {fixed, interval, isNum, shortRunId} from "./format.js";
import {lineageChain, startOf} from "./records.js";
import {selectRun} from "./runs.js";
import {query, view} from "./state.js";

const VERSION_COLUMNS = ["Version", "Parent", "Run", "Data interval", "Metrics", "Gate"];
let selected = query.get("version"); // the version whose lineage is shown (a string, as in its row's data)

/** The row of the version selected; null while none is (or it is not drawn yet). */
export const selectedVersionRow = () =>
  selected && document.querySelector(`tr.version[data-version="${CSS.escape(selected)}"]`);
export const versionSelected = () => Boolean(selected);

export function renderVersions(data) {
  const section = $("versions");
  section.hidden = false;
  const rows = data.versions.flatMap((v) => {
    const isSelected = String(v.version) === selected;
    const row = el(
      "tr",
      {
        class: classes("version", isSelected && "selected"),
        data: {version: String(v.version)},
        onclick: () => selectVersion(isSelected ? null : v.version),
      },
      el(
        "td",
        {},
        String(v.version),
        v.baseline ? el("span", {class: "baseline-badge", text: "current baseline"}) : null,
        v.withdrawn
          ? el("span", {
              class: "baseline-badge",
              title: `by ${v.withdrawn.by} at ${v.withdrawn.at}: ${v.withdrawn.reason}`,
              text: "withdrawn",
            })
          : null,
      ),
      el(
        "td",
        {class: "parent"},
        isNum(v.parent)
          ? versionLink(v.parent)
          : v.cold_start
            ? el("span", {title: v.cold_start, text: "cold start"})
            : "—",
      ),
      el(
        "td",
        {},
        v.run_id
          ? el("button", {
              type: "button",
              class: "link",
              title: v.run_id,
              text: shortRunId(v.run_id),
              onclick: (e) => {
                e.stopPropagation();
                selectRun(v.run_id);
              },
            })
          : "—",
      ),
      el("td", {text: interval(v)}),
      el(
        "td",
        {},
        Object.entries(v.metrics || {}).map(([k, m]) =>
          el("span", {class: "metric-pair"}, `${k} `, el("b", {text: fixed(m)})),
        ),
      ),
      el("td", {class: "muted", text: v.gate || "—"}),
    );
    return isSelected
      ? [row, el("tr", {class: "lineage"}, el("td", {colspan: VERSION_COLUMNS.length}, lineage(data.versions, v)))]
      : [row];
  });
  section.replaceChildren(
    el("h2", {}, "Published versions ", el("span", {class: "count muted", text: String(data.versions.length)})),
    rows.length
      ? el(
          "div",
          {class: "scroll"},
          el(
            "table",
            {},
            el(
              "thead",
              {},
              el(
                "tr",
                {},
                VERSION_COLUMNS.map((h) => el("th", {text: h})),
              ),
            ),
            el("tbody", {}, rows),
          ),
        )
      : el("p", {
          class: "empty",
          text: "No published versions yet: export publishes a model once the gate blesses it.",
        }),
  );
}

const versionLink = (version) =>
  el("button", {
    type: "button",
    class: "link",
    text: `v${version}`,
    onclick: (e) => {
      e.stopPropagation();
      selectVersion(version);
    },
  });

/** The version, its parent, and so on back: "v4 ← v3 ← v2 (cold start: why)", or to a parent no longer kept. */
function lineage(versions, version) {
  const chain = lineageChain(versions, version);
  const last = chain.at(-1);
  return el(
    "p",
    {class: "lineage-chain"},
    el("span", {class: "muted", text: "Lineage: "}),
    chain.map((v, i) => [i ? " ← " : null, v === version ? el("b", {text: `v${v.version}`}) : versionLink(v.version)]),
    isNum(last.parent)
      ? ` ← v${last.parent} (no longer kept)`
      : ` (${startOf(null, last.cold_start) ?? "start not recorded"})`,
  );
}

function selectVersion(version) {
  selected = version === null ? null : String(version);
  renderVersions(view.data);
  selectedVersionRow()?.scrollIntoView({block: "nearest"});
}
