"""The live view's web page, served at GET /: one HTML document that draws with the vendored uPlot (no CDN).

Why uPlot, vendored: the lab's machines often reach no CDN, and hand-drawn canvases had no axes, no units and no
way to read a value. uPlot (MIT, ~50 KB, protocols/api/static/) draws time axes, ticks, overlaid series and a
hover legend, and sizes its canvases by devicePixelRatio (crisp on high-DPI screens). The page loads it from
`live/static/` (relative, so it also works behind a path prefix).

What it shows, for an operator who glances at it: the claim box — the job's stage with i/N, the claim being
measured now (the runner's `measuring` event: the claims one reading serves, the chamber, what is staged, the
rows; or the claim the agent's session uses), then that claim's verdict with its measured value ± U, bound and
reason once known (else the last verdict decided, named). Per chamber a panel (each chamber of a fleet by its id),
side by side when the window is wide enough (compact panels for a fleet of more than two: shorter plots two to
a row, no inputs line), a wall-clock time axis
shared by that chamber's plots in 24-hour time with the date in the panel's heading, one plot per group of sensors
(the four barometers on one axis, the light sensors on one) tall enough for 4-5 ticks, each legend showing every
series' latest value with its unit (the value under the cursor while hovering), "no rows yet" on a panel without
rows. The header: the time of the last row, and "rows kept" — the rows the page holds now (per chamber the last
KEEP_S seconds, at most KEEP_ROWS) of those it received. When the job ends: "finished HH:MM:SS, N verdicts" with a
link to the report (served by the view; the page keeps the copy the stream sends, so the link works after the job
has exited), and no more reconnecting. A stream that breaks before that: a stale look, reconnecting; old traces
dropped when the service restarts (another `start_id`).
For tests and the benchmark it exposes on <body>: `data-rows-plotted` (rows received and drawn),
`data-rows-kept`, `data-last-seq`, `data-start-id`, `data-stale`, `data-ended`, `data-restarts`, `data-stream`
(connecting, open, reconnecting, closed: after the end), and
`window.liveLatencies` (seconds from a row's host time to the moment it was drawn), `window.liveClaimHistory`
(each text the "now" line showed), `window.liveReportUrl` (the report link's target).
Why a Python string and not an .html file: one route, one string; the library files are package data.
"""

LIVE_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>chamberlab live view</title>
<link rel="stylesheet" href="live/static/uPlot.min.css">
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: .6em 1.2em; color: #222; --panel-min: 600px; --plot-min: 290px; }
 body.compact { --panel-min: 420px; --plot-min: 190px; }
 body.compact .u-legend { font-size: 10px; } body.compact .state { display: none; }
 h1 { font-size: 1.2em; margin: 0; }
 #top { display: flex; gap: 1.2em; align-items: baseline; flex-wrap: wrap; }
 #status { font-weight: 600; color: #1a7f37; } body.stale #status { color: #b00; } body.ended #status { color: #1f3b73; }
 #report { font-weight: 600; display: none; } body.ended #report.ready { display: inline; }
 #updated, #kept, #endnote { color: #555; }
 #claim { padding: .35em .8em; background: #f3f6fa; border-left: 4px solid #3a6ea5; margin: .45em 0 .6em; }
 #claim div { margin: .1em 0; display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; overflow: hidden; }
 #claim .k { color: #666; } #claim b { font-weight: 600; }
 .verdict { padding: 0 .4em; border-radius: 3px; color: #fff; background: #777; }
 .verdict.pass { background: #1a7f37; } .verdict.fail { background: #b00; } .verdict.inconclusive { background: #b07800; }
 .reason { color: #553; }
 #chambers { display: grid; gap: 14px; grid-template-columns: repeat(auto-fit, minmax(min(100%, var(--panel-min)), 1fr)); }
 .chamber { min-width: 0; } .chamber h2 { font-size: 1.02em; margin: .1em 0; }
 .chamber h2 .k { font-weight: normal; color: #555; font-size: .92em; }
 .state { color: #444; font-family: monospace; margin-bottom: .3em; font-size: 11px; line-height: 1.3; }
 .note { color: #1f3b73; font-size: 12px; }
 .grid { display: grid; gap: 8px; grid-template-columns: repeat(auto-fill, minmax(min(100%, var(--plot-min)), 1fr)); }
 .plot { border: 1px solid #ddd; padding: 2px 4px; min-width: 0; overflow: hidden; position: relative; }
 .plot .title { font-size: 12px; font-weight: 600; }
 .plot .empty { position: absolute; left: 0; right: 0; top: 40%; text-align: center; color: #888; font-size: 13px; }
 .chamber.has-rows .empty { display: none; }
 body.stale .plot { opacity: .45; border-color: #b00; border-style: dashed; }
 .u-legend { font-size: 11px; line-height: 1.25; } .u-legend .u-marker { width: .8em; height: .8em; margin-right: 3px; }
 .u-legend.u-inline tr { margin-right: 10px; } .u-legend th, .u-legend td { padding: 0 2px; }
 .u-legend th { font-weight: 600; } .u-legend td { font-variant-numeric: tabular-nums; }
</style>
</head>
<body data-rows-plotted="0" data-rows-kept="0" data-last-seq="0" data-start-id="" data-stale="0" data-ended="0"
      data-restarts="0" data-stream="connecting">
<div id="top"><h1>chamberlab live view</h1><span id="status">connecting&hellip;</span>
<a id="report" href="report" target="_blank" rel="noopener">report</a><span id="endnote"></span>
<span id="updated">no rows yet</span>
<span id="kept" title="">rows kept <span id="rows">0</span> of <span id="received">0</span> received</span></div>
<div id="claim"><div id="now"><span class="k">stage</span> <b id="stage">&ndash;</b></div>
<div id="decided"><span class="k">verdict</span> <span id="claim-text">none yet</span></div></div>
<div id="chambers"></div>
<script src="live/static/uPlot.iife.min.js"></script>
<script>
"use strict";
(function () {
  const KEEP_S = 600, KEEP_ROWS = 4000, GAP_S = 2.0, STALE_AFTER_S = 16;
  const COLORS = ["#3a6ea5", "#d1495b", "#2e933c", "#e08e0b", "#7b4fa0", "#1b998b", "#8c564b", "#555"];
  const MERGE = {ir: "light", vis: "light"};   // families drawn on one axis besides a shared name prefix
  const CALIBRATION = "calibration";           // what a reading serves besides claims: the cross-sensor calibration
  const chambers = new Map();  // kind -> {root, state, grid, t: [], real: [], cols: {name: []}, groups: [...]}
  let startId = null, lastSeq = 0, received = 0, restarts = 0, lastRowT = null, lastMsg = Date.now(), dirty = new Set();
  let pending = [], stopped = false, ended = null, source = null, reportUrl = null, verdicts = {};
  window.liveLatencies = [];
  window.livePlots = {};
  window.liveClaimHistory = [];
  window.liveReportUrl = null;
  document.getElementById("kept").title = "the rows this page holds: per chamber the last " + (KEEP_S / 60) +
    " min, at most " + KEEP_ROWS.toLocaleString("en") + " rows";

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(v) {              // a reading: six significant digits at most, no float noise
    if (v === null || v === undefined) return "\\u2013";
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e7 || a < 1e-3) return v.toExponential(3);
    return String(Number(v.toPrecision(6)));
  }
  function tick(v) {             // a y tick: as few digits as tell the ticks apart
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e7 || a < 1e-3)) return v.toExponential(2);
    return String(Math.round(v * 1000) / 1000);
  }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function clock(t, tenths) {    // 24-hour local time, HH:MM:SS (and tenths when the ticks are that close)
    const d = new Date(t * 1000);
    let s = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    if (tenths) s += "." + Math.floor(d.getMilliseconds() / 100);
    return s;
  }
  function day(t) {
    const d = new Date(t * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate());
  }
  function count(n) { return Number(n).toLocaleString("en"); }
  function family(name) {
    const head = name.split("_")[0];
    return MERGE[head] || head;
  }
  function ySplits(u, axis, min, max) {  // 4-6 round ticks whatever the range (uPlot's own may give 2 or 3)
    const range = max - min;
    if (!(range > 0) || !isFinite(range)) return [min];
    let best = null;
    const e0 = Math.floor(Math.log10(range / 5));
    for (let e = e0 - 1; e <= e0 + 1; e += 1) {
      [1, 2, 2.5, 5].forEach(function (m) {
        const incr = m * Math.pow(10, e), first = Math.ceil(min / incr - 1e-9) * incr;
        const n = Math.floor((max - first) / incr + 1e-9) + 1;
        const score = n < 4 ? 100 - n : Math.abs(n - 5);   // 5 best, then 4 or 6, ...; fewer than 4 last
        if (best === null || score < best.score) best = {incr: incr, first: first, n: n, score: score};
      });
    }
    const out = [];
    for (let i = 0; i < best.n; i += 1) out.push(Number((best.first + i * best.incr).toPrecision(12)));
    return out;
  }
  function plotHeight() { return document.body.classList.contains("compact") ? 130 : 210; }
  function lastValue(data) {     // the latest non-null value of a series
    for (let i = data.length - 1; i >= 0; i -= 1) if (data[i] !== null && data[i] !== undefined) return data[i];
    return null;
  }

  function chamberFor(kind, info) {
    let c = chambers.get(kind);
    if (c) return c;
    const root = el("div", "chamber"), grid = el("div", "grid"), state = el("div", "state"), note = el("div", "note");
    const head = el("h2", null, kind + (info.config ? " (" + info.config + ")" : "") + " ");
    const sub = el("span", "k", "wall-clock time");
    head.append(sub);
    root.dataset.chamber = kind;
    root.append(head, note, state, grid);
    document.getElementById("chambers").append(root);
    document.body.classList.toggle("compact", chambers.size + 1 > 2);
    c = {root: root, state: state, note: note, grid: grid, sub: sub, t: [], real: [], cols: {}, groups: []};
    const fams = new Map();
    (info.sensors || []).forEach(function (s) {
      const key = family(s.name) + "|" + s.unit;
      if (!fams.has(key)) fams.set(key, {name: family(s.name), unit: s.unit, names: []});
      fams.get(key).names.push(s.name);
      c.cols[s.name] = [];
    });
    fams.forEach(function (f) {
      const box = el("div", "plot"), title = el("div", "title", f.name + " (" + f.unit + ")");
      box.dataset.group = kind + "/" + f.name; box.dataset.unit = f.unit;
      box.append(title, el("div", "empty", "no rows yet")); grid.append(box);
      const unit = f.unit;
      const opts = {
        width: Math.max(200, box.clientWidth - 8), height: plotHeight(),
        scales: {x: {time: true}},
        cursor: {sync: {key: "chamber-" + kind}},
        legend: {live: true},
        series: [{label: "time", value: function (u, v, s, i) {
          if (i === null || i === undefined) { const t = lastValue(u.data[0]); return t === null ? "\\u2013" : clock(t) + " (latest)"; }
          return v == null ? "\\u2013" : clock(v);
        }}].concat(f.names.map(function (n, i) {
          return {label: n, stroke: COLORS[i % COLORS.length], width: 1.4, spanGaps: false,
                  value: function (u, v, s, idx) {
                    const shown = (idx === null || idx === undefined) ? lastValue(u.data[s]) : v;
                    return fmt(shown) + " " + unit;
                  }};
        })),
        axes: [{size: 30, space: 80, values: function (u, splits, ax, space, incr) {  // room for HH:MM:SS.s
                  return splits.map(function (t) { return clock(t, incr < 1); });
                }},
               {label: unit, labelSize: 16, size: 62, splits: ySplits,
                values: function (u, ticks) { return ticks.map(tick); }}],
      };
      const plot = new uPlot(opts, [[]].concat(f.names.map(function () { return []; })), box);
      plot.root.querySelectorAll("canvas").forEach(function (cv) { cv.dataset.sensor = kind + "/" + f.names[0]; });
      window.livePlots[kind + "/" + f.name] = plot;
      c.groups.push({plot: plot, names: f.names, unit: unit, box: box});
      if (window.ResizeObserver) {
        new ResizeObserver(function () {
          const w = Math.max(200, box.clientWidth - 8), h = plotHeight();
          if (Math.abs(plot.width - w) > 1 || plot.height !== h) plot.setSize({width: w, height: h});
        }).observe(box);
      }
    });
    chambers.set(kind, c);
    return c;
  }
  function clearAll() {
    chambers.forEach(function (c) { c.groups.forEach(function (g) { g.plot.destroy(); }); c.root.remove(); });
    chambers.clear();
    window.livePlots = {};
    lastSeq = 0; received = 0; lastRowT = null; pending = []; dirty.clear(); ended = null; verdicts = {};
    document.body.classList.remove("ended", "compact");
    document.body.dataset.ended = "0";
  }
  function addRow(c, row) {
    const n = c.t.length;
    if (n && row.t - c.t[n - 1] > GAP_S) {            // a pause: break the line instead of bridging it
      c.t.push(c.t[n - 1] + 1e-3); c.real.push(false);
      Object.keys(c.cols).forEach(function (k) { c.cols[k].push(null); });
    }
    c.t.push(row.t); c.real.push(true);
    Object.keys(c.cols).forEach(function (k) {
      const v = row.values[k];
      c.cols[k].push(v === undefined ? null : v);
    });
    let cut = 0, kept = 0;
    c.real.forEach(function (r) { if (r) kept += 1; });
    while (cut < c.t.length - 1 && (kept > KEEP_ROWS || row.t - c.t[cut] > KEEP_S)) { if (c.real[cut]) kept -= 1; cut += 1; }
    if (cut) {
      c.t.splice(0, cut); c.real.splice(0, cut);
      Object.keys(c.cols).forEach(function (k) { c.cols[k].splice(0, cut); });
    }
  }
  function keptRows() {
    let n = 0;
    chambers.forEach(function (c) { c.real.forEach(function (r) { if (r) n += 1; }); });
    return n;
  }
  function flush() {
    flush.scheduled = false;
    dirty.forEach(function (c) {
      c.root.classList.toggle("has-rows", c.t.length > 0);
      if (c.t.length) c.sub.textContent = "wall-clock time, " + day(c.t[c.t.length - 1]);
      c.groups.forEach(function (g) { g.plot.setData([c.t.slice()].concat(g.names.map(function (n) { return c.cols[n].slice(); }))); });
    });
    dirty.clear();
    const now = Date.now() / 1000;
    pending.forEach(function (t) { window.liveLatencies.push(now - t); });
    if (window.liveLatencies.length > 20000) window.liveLatencies.splice(0, 10000);
    received += pending.length; pending = [];
    const kept = keptRows();
    document.getElementById("rows").textContent = count(kept);
    document.getElementById("received").textContent = count(received);
    document.body.dataset.rowsPlotted = String(received);
    document.body.dataset.rowsKept = String(kept);
    document.body.dataset.lastSeq = String(lastSeq);
    showUpdated();
  }
  function schedule() {
    if (!flush.scheduled) { flush.scheduled = true; setTimeout(flush, 16); }
  }
  function showUpdated() {
    const u = document.getElementById("updated");
    if (lastRowT === null) { u.textContent = "no rows yet"; return; }
    if (ended) { u.textContent = "last row " + clock(lastRowT); return; }
    const ago = Math.max(0, Date.now() / 1000 - lastRowT);
    u.textContent = "last row " + clock(lastRowT) + " (" + (ago < 10 ? ago.toFixed(1) : Math.round(ago)) + " s ago)";
  }
  function setStale(stale, why) {
    if (ended) return;
    const s = document.getElementById("status");
    document.body.classList.toggle("stale", stale);
    document.body.dataset.stale = stale ? "1" : "0";
    s.textContent = stale ? why : "live";
  }
  function sep(box) { box.append(" \\u00b7 "); }
  function keyed(box, key, value) { sep(box); box.append(el("span", "k", key + " ")); box.append(value); }
  function result(box, r) {      // a verdict: badge, m ± U, source, then its reason
    box.append(el("span", "verdict " + r.verdict, r.verdict));
    if (r.value !== null && r.value !== undefined) {
      keyed(box, "measured", r.value + (r.u !== null && r.u !== undefined ? " \\u00b1 " + r.u : "") + " " + (r.unit || ""));
    }
    if (r.source) box.append(" (" + r.source + ")");
    if (r.reason) { box.append(" \\u2014 "); box.append(el("span", "reason", r.reason + (r.class ? " [" + r.class + "]" : ""))); }
  }
  function nowLine(snap) {       // the stage, then what is measured now and for which claim
    const st = snap.stage, m = snap.measuring, c = snap.claim;
    const stage = document.getElementById("stage");
    stage.textContent = snap.end ? "ended (" + snap.end.status + ")"
      : st ? st.name + (st.total ? " " + st.done + "/" + st.total : "") : "\\u2013";
    const box = document.getElementById("now");
    while (box.childNodes.length > 3) box.removeChild(box.lastChild);
    let focus = null;
    if (snap.end) {
      keyed(box, "job ended", clock(snap.end.at) + ", " + snap.end.verdicts + " verdicts");
    } else if (m && m.claims.length) {
      const named = m.claims.filter(function (id) { return id !== CALIBRATION; });
      const others = named.slice(1).concat(named.length < m.claims.length && named.length ? ["the calibration"] : []);
      focus = named.length ? named[0] : null;
      keyed(box, "measuring", el("b", null, focus || "the wind tunnel's calibration"));
      if (others.length) box.append(" (and " + others.join(", ") + ")");
      box.append(" on " + m.chamber);
      if (m.bound) keyed(box, "bound", m.bound);
      keyed(box, "staged", m.staged + (m.rows ? ", " + m.rows + " rows" : ""));
    } else if (c && c.activity !== "graded") {
      focus = c.id;
      keyed(box, "session claim", el("b", null, c.id));
      box.append(" on " + (c.chamber || "?") + ": " + c.activity);
      if (c.bound) keyed(box, "bound", c.bound);
    } else if (st && st.note) {
      sep(box); box.append(st.note);
    }
    const text = box.textContent.replace(/\\s+/g, " ").trim();
    box.title = text;
    const h = window.liveClaimHistory;
    if (!h.length || h[h.length - 1] !== text) { h.push(text); if (h.length > 2000) h.splice(0, 1000); }
    return focus;
  }
  function verdictLine(snap, focus) {  // the claim measured now: its verdict once known; else the last one decided
    const box = document.getElementById("claim-text"), key = document.querySelector("#decided .k");
    box.textContent = "";
    if (snap.end) {                    // the job's verdicts, counted
      key.textContent = "verdicts";
      const counts = Object.keys(snap.end.counts || {}).map(function (k) { return k + " " + snap.end.counts[k]; });
      box.textContent = counts.length ? counts.join(", ") : "none";
      if (snap.end.note) { sep(box); box.append(snap.end.note); }
      return;
    }
    const own = focus && verdicts[focus];
    if (own) {
      key.textContent = "its verdict";
      result(box, own);
      box.parentNode.title = box.parentNode.textContent.replace(/\\s+/g, " ").trim();
      return;
    }
    const c = snap.claim;
    key.textContent = focus ? "last verdict" : "verdict";
    if (!c || c.activity !== "graded") {
      box.textContent = focus ? "none yet for this claim" : "none yet";
      return;
    }
    box.append(el("b", null, c.id));
    const parts = [c.component, c.parameter].filter(Boolean).join(", ");
    if (parts) box.append(" (" + parts + ")");
    if (c.bound) keyed(box, "bound", c.bound);
    sep(box);
    if (c.result && c.result.verdict) {
      result(box, c.result);
      if (c.chamber) { sep(box); box.append("on " + c.chamber); }
    } else {
      box.append((c.chamber ? "on " + c.chamber + ": " : "") + "graded");
    }
    box.parentNode.title = box.parentNode.textContent.replace(/\\s+/g, " ").trim();
  }
  function showEnd(end) {
    ended = end;
    document.body.classList.add("ended");
    document.body.classList.remove("stale");
    document.body.dataset.stale = "0";
    document.body.dataset.ended = "1";
    document.getElementById("status").textContent =
      end.status + " " + clock(end.at) + ", " + end.verdicts + " verdict" + (end.verdicts === 1 ? "" : "s");
    const link = document.getElementById("report");
    if (end.report) {
      if (!reportUrl) { link.href = end.report; window.liveReportUrl = link.href; }
      link.textContent = "report" + (end.report_name ? " (" + end.report_name + ")" : "");
      link.classList.add("ready");
    }
    document.getElementById("endnote").textContent = end.report ? "" : "no report written";
    if (!end.report) finish();
    showUpdated();
  }
  function finish() {            // the job has ended: nothing more will come, so no reconnecting
    if (source) { source.close(); source = null; }
    document.body.dataset.stream = "closed";
  }
  function keepReport(data) {    // the copy the stream sends: the link works once the job's process has gone
    const r = JSON.parse(data);
    if (reportUrl) URL.revokeObjectURL(reportUrl);
    reportUrl = URL.createObjectURL(new Blob([r.html], {type: "text/html"}));
    const link = document.getElementById("report");
    link.href = reportUrl; window.liveReportUrl = reportUrl;
    link.classList.add("ready");
    finish();
  }
  function update(snap) {
    if (startId !== null && snap.start_id !== startId) { clearAll(); restarts += 1; }
    startId = snap.start_id;
    document.body.dataset.startId = startId;
    document.body.dataset.restarts = String(restarts);
    Object.keys(snap.chambers).forEach(function (kind) {
      const info = snap.chambers[kind], c = chamberFor(kind, info);
      const state = Object.keys(info.state || {}).map(function (k) { return k + "=" + info.state[k]; });
      c.state.textContent = "inputs: " + (state.length ? state.join(", ") : "(none set)") +
        " \\u00b7 rows measured: " + count(info.rows);
      c.note.textContent = info.note || "";
    });
    for (const row of snap.rows) {
      if (row.seq <= lastSeq) continue;
      const c = chambers.get(row.chamber) || chamberFor(row.chamber, snap.chambers[row.chamber] || {});
      addRow(c, row);
      dirty.add(c);
      pending.push(row.t);
      lastSeq = row.seq;
      lastRowT = lastRowT === null ? row.t : Math.max(lastRowT, row.t);
    }
    lastSeq = Math.max(lastSeq, snap.seq);
    if (snap.verdicts) verdicts = snap.verdicts;  // null: none recorded since the last update
    verdictLine(snap, nowLine(snap));
    if (snap.end && !ended) showEnd(snap.end);
    schedule();
  }
  function connect() {
    source = new EventSource("live/stream");
    source.addEventListener("open", function () {
      lastMsg = Date.now(); stopped = false; setStale(false); document.body.dataset.stream = "open";
    });
    source.addEventListener("error", function () {
      if (ended) { finish(); return; }             // the stream ended with the job: stay as it ended
      document.body.dataset.stream = "reconnecting";
      stopped = true;
      setStale(true, "stream stopped \\u2014 showing the last data; reconnecting");
    });
    source.addEventListener("update", function (e) { lastMsg = Date.now(); stopped = false; setStale(false); update(JSON.parse(e.data)); });
    source.addEventListener("report", function (e) { keepReport(e.data); });
    source.addEventListener("ping", function (e) {
      lastMsg = Date.now(); stopped = false; setStale(false);
      const p = JSON.parse(e.data);
      if (startId !== null && p.start_id !== startId) { clearAll(); restarts += 1; startId = p.start_id; }
    });
  }
  setInterval(function () {
    showUpdated();
    if (!ended && !stopped && Date.now() - lastMsg > STALE_AFTER_S * 1000) setStale(true, "no news from the service for " +
      Math.round((Date.now() - lastMsg) / 1000) + " s");
  }, 1000);
  if (typeof uPlot === "undefined") {
    document.getElementById("status").textContent = "the charting library did not load (live/static/uPlot.iife.min.js)";
    console.error("uPlot did not load");
    return;
  }
  connect();
})();
</script>
</body>
</html>
"""
