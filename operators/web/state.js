// What the page's parts share: the pipeline's overview and the runs selected and open (?run= opens one).

export const query = new URLSearchParams(location.search);

export const view = {
  data: null, // the pipeline's overview (api.getOverview), once loaded
  selected: query.get("run"), // the run highlighted in the table and the charts
  open: new Set(query.has("run") ? [query.get("run")] : []), // the runs whose details are open
};
