// The training-runs page of one tfdist pipeline (at .../ui/<pipeline id>) or the list of pipelines (at .../ui/):
// the entry module (page.html loads it); it loads the data and refreshes it, the other modules draw the parts.

import {getJSON, getOverview, PIPELINE_ID, setError, UI_DIR} from "./api.js";
import {renderCharts} from "./charts.js";
import {$, el} from "./dom.js";
import {renderLive} from "./live.js";
import {LIVE_STATES} from "./records.js";
import {buildRunsSection, markMoreRight, renderFilterOptions, renderRuns, selectRun} from "./runs.js";
import {query, view} from "./state.js";
import {renderVersions, selectedVersionRow, versionSelected} from "./versions.js";

const BUSY_REFRESH_MS = 10000;
const IDLE_REFRESH_MS = 60000;
let pipelines = []; // the pipelines the user may read
let refreshTimer = 0;
let refreshing = false;
let scrollPending = query.has("run") || query.has("version");

// ---- theme: Airflow's colour mode (localStorage "theme", same origin), else the system's

function applyTheme() {
  const stored = ["dark", "light"].find((mode) => localStorage.getItem("theme") === mode); // Airflow's own setting
  document.documentElement.dataset.theme =
    stored || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

// ---- top bar and the list of pipelines

function renderTop() {
  const known = pipelines.some((p) => p.pipeline_id === PIPELINE_ID);
  $("pipeline-select").replaceChildren(
    el("option", {value: "", text: "Choose a pipeline…", disabled: Boolean(PIPELINE_ID), selected: !PIPELINE_ID}),
    ...(PIPELINE_ID && !known ? [el("option", {value: PIPELINE_ID, text: PIPELINE_ID, selected: true})] : []),
    ...pipelines.map((p) =>
      el("option", {value: p.pipeline_id, text: p.pipeline_id, selected: p.pipeline_id === PIPELINE_ID}),
    ),
  );
  const pipeline = view.data || pipelines.find((p) => p.pipeline_id === PIPELINE_ID);
  $("title").textContent = PIPELINE_ID || "Training runs";
  $("description").textContent = pipeline?.description || "";
  $("model").hidden = !pipeline?.model_name;
  $("model").textContent = pipeline?.model_name ? `model ${pipeline.model_name}` : "";
}

function renderIndex() {
  const section = $("index");
  section.hidden = false;
  section.replaceChildren(
    el("h2", {text: "Pipelines"}),
    pipelines.length
      ? el(
          "ul",
          {class: "pipelines"},
          pipelines.map((p) =>
            el(
              "li",
              {},
              el("a", {href: new URL(encodeURIComponent(p.pipeline_id), UI_DIR).href, text: p.pipeline_id}),
              p.model_name ? el("span", {class: "chip", text: `model ${p.model_name}`}) : null,
              el("span", {class: "muted", text: p.description || ""}),
            ),
          ),
        )
      : el("p", {class: "empty", text: "No pipelines you may read yet: a DAG built from a tfdist spec appears here."}),
  );
}

// ---- loading

function render(data) {
  view.data = data;
  renderTop();
  renderLive(data.runs, {onSelect: selectRun, onEnded: refresh});
  renderFilterOptions(data);
  renderRuns();
  renderVersions(data);
  renderCharts(data, selectRun);
  if (scrollPending) scrollToTarget();
}

/** ?version= scrolls to its version (its run still highlighted), ?run= to the run; once, when the row exists. */
function scrollToTarget() {
  const row = versionSelected()
    ? selectedVersionRow()
    : document.querySelector(`tr.run[data-run-id="${CSS.escape(view.selected)}"]`);
  if (!row) return;
  scrollPending = false;
  row.scrollIntoView({block: "center"});
}

async function refresh() {
  if (refreshing) return;
  refreshing = true;
  clearTimeout(refreshTimer);
  try {
    const data = await getOverview();
    setError("overview", null);
    render(data);
  } catch (error) {
    setError("overview", error);
    if (!view.data && error.status) return; // 401/403/404: nothing to show until the user acts
  } finally {
    refreshing = false;
  }
  const busy = view.data?.runs.some((r) => LIVE_STATES.has(r.state));
  refreshTimer = setTimeout(refresh, busy ? BUSY_REFRESH_MS : IDLE_REFRESH_MS);
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
    resizeTimer = setTimeout(() => view.data && (renderCharts(view.data, selectRun), markMoreRight()), 150);
  });
  try {
    pipelines = await getJSON("pipelines");
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
