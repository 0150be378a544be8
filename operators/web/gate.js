// The gates in the runs table: the model gate's decision and checks, the data gate's decision; in a run's details,
// the data gate's drift per feature element (failed checks first, two histograms overlaid) and the baseline's
// metrics against this run's.

import {getRunRecord, setError} from "./api.js";
import {classes, el, svg} from "./dom.js";
import {fixed, isNum, quoted, shortValue, signed} from "./format.js";
import {deltaVerdict} from "./records.js";

const DATA_ROWS = 12;
const dataGates = new Map(); // run id → the data gate's record (fetched when its details open)
const histogram = new Map(); // run id → the feature element whose histograms are shown

/** The gate's decision, the baseline it compared with, each threshold as a check with its margin, and the
 * human approval's decision (export.approval). */
export function gateCell(run) {
  if (run.blessed === null || run.blessed === undefined) return "—";
  return [
    el("span", {class: `badge ${run.blessed ? "good" : "bad"}`, text: run.blessed ? "blessed" : "refused"}),
    run.baseline ? el("span", {class: "sub", text: ` vs v${run.baseline.version}`}) : null,
    run.approval ? el("div", {class: `approval ${run.approval.decision}`, text: run.approval_summary}) : null,
    run.checks.length ? el("div", {class: "checks-grid"}, run.checks.map(checkLine)) : null,
  ];
}

/** The data gate's decision; the version whose data it compared with when the gate's column does not say it. */
export function dataCell(run) {
  if (!run.data_decision) return "—";
  const refused = run.data_decision === "refused";
  const warned = !refused && run.data_failures.length > 0;
  const compared = isNum(run.data_baseline_version) ? `vs v${run.data_baseline_version} data` : null;
  return [
    el("span", {
      class: `badge ${refused ? "bad" : warned ? "warn" : "good"}`,
      title: [compared, ...run.data_failures].filter(Boolean).join("\n") || null,
      text: refused ? "refused" : warned ? "warned" : "passed",
    }),
    compared && run.data_baseline_version !== run.baseline?.version ? el("div", {class: "sub", text: compared}) : null,
  ];
}

const checkLine = (c) =>
  el(
    "div",
    {
      class: `check ${c.passed ? "pass" : "fail"}`,
      title:
        c.kind === "change"
          ? `value ${fixed(c.value)}, baseline ${fixed(c.baseline)}, change ${signed(c.delta)}, margin ${signed(c.margin)}`
          : `value ${fixed(c.value)}, margin ${signed(c.margin)}`,
    },
    el("span", {class: "mark", text: c.passed ? "✓" : "✗"}),
    el("span", {text: `${c.metric} ${c.rule}`}),
    el("span", {class: "margin", text: signed(c.margin)}),
  );

/** The run's data gate record, fetched the first time (then redraw() shows it); a row clicked shows its histograms. */
export function dataGateView(run, redraw) {
  if (!run.data_decision) return el("p", {class: "muted", text: "No data gate record."});
  const record = dataGates.get(run.run_id);
  if (!record) {
    getRunRecord(run.run_id, "data")
      .then((found) => {
        dataGates.set(run.run_id, found);
        redraw();
      })
      .catch((error) => setError("data gate", error));
    return el("p", {class: "muted", text: "Loading…"});
  }
  const categorical = new Set(Object.keys(record.statistics?.categorical || {}));
  const failed = record.checks.filter((c) => !c.passed);
  const drift = record.checks
    .filter((c) => c.check === "drift" && !categorical.has(c.feature))
    .sort((a, b) => a.margin - b.margin);
  const rows = [...failed, ...drift.filter((c) => c.passed).slice(0, Math.max(0, DATA_ROWS - failed.length))];
  const shown =
    histogram.get(run.run_id) ?? rows.find((c) => c.check === "drift" && !categorical.has(c.feature))?.feature;
  return [
    record.why_not_compared
      ? el("p", {class: "muted", text: `${record.why_not_compared}: only checks needing no baseline ran.`})
      : null,
    el(
      "table",
      {class: "mini data-checks"},
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          ["check", "feature", "this run", "baseline", "allowed", "margin"].map((h) =>
            el("th", {class: ["check", "feature", "allowed"].includes(h) ? null : "num", text: h}),
          ),
        ),
      ),
      el(
        "tbody",
        {},
        rows.map((c) =>
          el(
            "tr",
            {
              class: classes(
                !c.passed && (c.mode === "refuse" ? "failed" : "warned"),
                c.feature === shown && c.check === "drift" && "shown",
              ),
              data: {feature: c.feature},
              title: c.statistic,
              onclick: () => {
                histogram.set(run.run_id, c.feature);
                redraw();
              },
            },
            el("td", {text: c.check}),
            el("td", {class: "mono", text: c.feature}),
            el("td", {class: "num", text: shortValue(c.value)}),
            el("td", {class: "num", text: shortValue(c.baseline)}),
            el("td", {text: c.rule}),
            el("td", {class: classes("num", c.passed ? "good" : "bad"), text: signed(c.margin, 3)}),
          ),
        ),
      ),
    ),
    shown ? histogramOverlay(record, shown) : null,
    categoricalTable(record, categorical),
    record.not_compared?.length
      ? el(
          "p",
          {class: "muted not-compared"},
          "Not compared (nothing in the baseline's data to compare with): ",
          record.not_compared.map((n, i) => [
            i ? "; " : null,
            el("span", {class: "mono", text: n.feature}),
            ` ${n.why}`,
          ]),
        )
      : null,
  ];
}

/** Per categorical feature: the L∞ distance of its value shares with the value that moved most, the share of its
 * values outside the baseline's vocabulary with the most frequent one, its missing rate; each against its bound. */
function categoricalTable(record, categorical) {
  const checksOf = (feature) =>
    Object.fromEntries(record.checks.filter((c) => c.feature === feature).map((c) => [c.check, c]));
  const features = [...categorical]
    .map((feature) => [feature, checksOf(feature)])
    .filter(([, found]) => Object.keys(found).length);
  if (!features.length) return null;
  const cell = (c, text, detail) =>
    c
      ? el(
          "td",
          {
            class: classes("num", !c.passed && (c.mode === "refuse" ? "bad" : "warn")),
            data: {check: c.check},
            title: `${c.statistic}; allowed ${c.rule}; margin ${signed(c.margin, 3)}`,
          },
          text,
          detail ? el("div", {class: "sub", text: detail}) : null,
        )
      : el("td", {class: "num muted", text: "—"});
  const share = (v) => fixed(v, 3);
  const {drift, vocabulary, missing} = record.settings || {};
  const head = [
    ["feature"],
    ["L∞ distance", drift && `≤ ${drift.max_distance}`],
    ["value moved most"],
    ["outside vocabulary", vocabulary && `≤ ${vocabulary.max_oov_share}`],
    ["missing rate", missing && `change ≤ ${missing.max_change}`],
  ];
  return el(
    "div",
    {class: "categorical"},
    el("h4", {text: "Categorical features"}),
    el(
      "table",
      {class: "mini categorical-drift"},
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          head.map(([h, bound], i) =>
            el("th", {class: i ? "num" : null}, h, bound ? el("div", {class: "sub", text: bound}) : null),
          ),
        ),
      ),
      el(
        "tbody",
        {},
        features.map(([feature, c]) => {
          const moved = c.drift?.top_value,
            outside = c.vocabulary?.top_value;
          return el(
            "tr",
            {data: {feature}},
            el("td", {class: "mono", text: feature}),
            cell(
              c.drift,
              share(c.drift?.value),
              isNum(c.drift?.within) ? `exact to ±${share(c.drift.within)} (top values cut)` : null,
            ),
            el("td", {
              class: "num",
              text: moved ? `${quoted(moved.value)} ${share(moved.baseline)} → ${share(moved.share)}` : "—",
            }),
            cell(
              c.vocabulary,
              share(c.vocabulary?.value),
              [
                outside && `most frequent ${quoted(outside.value)} ${share(outside.share)}`,
                isNum(c.vocabulary?.beyond_top) && `${share(c.vocabulary.beyond_top)} beyond the top values`,
              ]
                .filter(Boolean)
                .join("; "),
            ),
            cell(c.missing, share(c.missing?.value), c.missing && `baseline ${share(c.missing.baseline)}`),
          );
        }),
      ),
    ),
  );
}

/** The feature element's histograms (this run's filled, the baseline's outlined) as shares of their rows. */
function histogramOverlay(record, name) {
  const [feature, index] = name.includes("[")
    ? [name.slice(0, name.indexOf("[")), Number(name.slice(name.indexOf("[") + 1, -1))]
    : [name, 0];
  const sides = [record.statistics, record.baseline_statistics].map(
    (s) => s?.features?.[feature]?.histogram?.[index] ?? {},
  );
  const shares = sides.map((h) => {
    const total = Object.values(h).reduce((a, b) => a + b, 0) || 1;
    return new Map(Object.entries(h).map(([bin, n]) => [Number(bin), n / total]));
  });
  const bins = [...new Set(shares.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
  if (!bins.length) return null;
  const [width, height, lo, hi] = [320, 90, bins[0], bins[bins.length - 1]];
  const x = (bin) => ((bin - lo) / Math.max(1, hi - lo + 1)) * width,
    w = width / Math.max(1, hi - lo + 1);
  const top = Math.max(...shares.flatMap((m) => [...m.values()]));
  const bar = (m, cls) =>
    [...m].map(([bin, v]) =>
      svg("rect", {
        class: cls,
        x: x(bin),
        width: Math.max(1, w - 1),
        y: height - (v / top) * height,
        height: (v / top) * height,
      }),
    );
  return el(
    "figure",
    {class: "histogram"},
    svg(
      "svg",
      {viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `histograms of ${name}`},
      bar(shares[0], "now"),
      bar(shares[1], "base"),
    ),
    el("figcaption", {}, `${name}: this run (filled) and the baseline's data (outlined), share of rows per bin`),
  );
}

/** The baseline's metrics against this run's, each delta judged by its metric's direction (directions). */
export function baselineTable(run, directions) {
  if (!run.baseline)
    return el("p", {class: "muted", text: "No baseline compared: no earlier version, or no change thresholds."});
  return el(
    "table",
    {class: "mini"},
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        ["metric", "baseline", "this run", "Δ"].map((h) => el("th", {class: h === "metric" ? null : "num", text: h})),
      ),
    ),
    el(
      "tbody",
      {},
      Object.entries(run.baseline.metrics).map(([metric, base]) => {
        const value = run.metrics?.[metric];
        const delta = isNum(value) && isNum(base) ? value - base : null;
        return el(
          "tr",
          {},
          el("td", {text: metric}),
          el("td", {class: "num", text: fixed(base)}),
          el("td", {class: "num", text: fixed(value)}),
          el("td", {class: classes("num", deltaVerdict(directions?.[metric], delta)), text: signed(delta)}),
        );
      }),
    ),
  );
}
