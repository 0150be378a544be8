// The plugin's routes next to the page (../pipelines...), fetched as the signed-in Airflow user; the errors shown.

import {$, el} from "./dom.js";

export const UI_DIR = new URL("./", location.href);
const API = new URL("../", UI_DIR);
/** The pipeline of the page at .../ui/<pipeline id>; "" on the list of pipelines (.../ui/). */
export const PIPELINE_ID = decodeURIComponent(location.pathname.slice(location.pathname.lastIndexOf("/") + 1));

const HTTP_ERRORS = {401: "Not signed in to Airflow (401)", 403: "No permission (403)", 404: "Not found (404)"};
const errors = new Map(); // source → message

export async function getJSON(path) {
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

/** The pipeline's overview: every run, the metrics and thresholds to chart, the published versions. */
export const getOverview = () => getJSON(`pipelines/${encodeURIComponent(PIPELINE_ID)}`);

/** One run's record: "progress", "curve" or "data" (its data gate's). */
export const getRunRecord = (runId, record) =>
  getJSON(`pipelines/${encodeURIComponent(PIPELINE_ID)}/runs/${encodeURIComponent(runId)}/${record}`);

/** Show (or, error null, clear) the error of one source of data. */
export function setError(source, error) {
  if (error) errors.set(source, error.message);
  else errors.delete(source);
  const box = $("error");
  box.hidden = errors.size === 0;
  box.replaceChildren(...[...new Set(errors.values())].map((message) => el("p", {text: message})));
}
