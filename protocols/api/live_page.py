"""The live view's web page, served at GET /: one HTML document that draws with the vendored uPlot (no CDN).

Why uPlot, vendored: the lab's machines often reach no CDN, and hand-drawn canvases had no axes, no units and no
way to read a value. uPlot (MIT, ~50 KB, protocols/api/static/) draws time axes, ticks, overlaid series and a
hover legend, and sizes its canvases by devicePixelRatio (crisp on high-DPI screens). The page loads it from
`live/static/` (relative, so it also works behind a path prefix).

What it shows: per chamber (each chamber of a fleet by its id, with a line saying what it is doing) a time axis
in wall-clock time shared by that chamber's plots (never the other chamber's rows), one plot per group of sensors
(the four barometers on one axis, the light sensors on one), y ticks in the group's unit; the claim line (stage of
the job, claim, bound, measured value ± U, verdict); the time of the last row; a stale look once the stream stops;
old traces dropped when the service restarts (another `start_id`). For tests and the benchmark it exposes on
<body>: `data-rows-plotted`, `data-last-seq`, `data-start-id`, `data-stale`, `data-restarts`, and
`window.liveLatencies` (seconds from a row's host time to the moment it was drawn).
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
 body { font: 14px/1.4 system-ui, sans-serif; margin: .8em 1.5em; color: #222; }
 h1 { font-size: 1.25em; margin: 0 0 .3em; }
 #top { display: flex; gap: 1.5em; align-items: baseline; flex-wrap: wrap; }
 #status { font-weight: 600; color: #1a7f37; } body.stale #status { color: #b00; }
 #updated { color: #555; }
 #claim { padding: .45em .8em; background: #f3f6fa; border-left: 4px solid #3a6ea5; margin: .5em 0; }
 #claim .k { color: #666; } #claim b { font-weight: 600; }
 .verdict { padding: 0 .4em; border-radius: 3px; color: #fff; background: #777; }
 .verdict.pass { background: #1a7f37; } .verdict.fail { background: #b00; } .verdict.inconclusive { background: #b07800; }
 .chamber { margin: .8em 0; } .chamber h2 { font-size: 1.05em; margin: .2em 0; }
 .state { color: #444; font-family: monospace; margin-bottom: .3em; font-size: 12px; }
 .note { color: #1f3b73; font-size: 12px; }
 .grid { display: flex; flex-wrap: wrap; gap: 10px; }
 .plot { border: 1px solid #ddd; padding: 2px 4px; }
 .plot .title { font-size: 12px; font-weight: 600; }
 body.stale .plot { opacity: .45; border-color: #b00; border-style: dashed; }
 .u-legend { font-size: 11px; } .u-legend .u-marker { width: .8em; height: .8em; }
</style>
</head>
<body data-rows-plotted="0" data-last-seq="0" data-start-id="" data-stale="0" data-restarts="0">
<div id="top"><h1>chamberlab live view</h1><span id="status">connecting&hellip;</span>
<span id="updated">no rows yet</span><span>rows plotted: <span id="rows">0</span></span></div>
<div id="claim"><span class="k">stage</span> <b id="stage">&ndash;</b> &middot; <span class="k">claim</span>
<span id="claim-text">none yet</span></div>
<div id="chambers"></div>
<script src="live/static/uPlot.iife.min.js"></script>
<script>
"use strict";
(function () {
  const KEEP_S = 600, KEEP_ROWS = 4000, GAP_S = 2.0, STALE_AFTER_S = 16;
  const COLORS = ["#3a6ea5", "#d1495b", "#2e933c", "#e08e0b", "#7b4fa0", "#1b998b", "#8c564b", "#555"];
  const MERGE = {ir: "light", vis: "light"};   // families drawn on one axis besides a shared name prefix
  const chambers = new Map();  // kind -> {root, state, grid, t: [], cols: {name: []}, groups: [{plot, names, unit}]}
  let startId = null, lastSeq = 0, plotted = 0, restarts = 0, lastRowT = null, lastMsg = Date.now(), dirty = new Set();
  let pending = [], stopped = false;
  window.liveLatencies = [];
  window.livePlots = {};

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "\\u2013";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    return String(Math.round(v * 1000) / 1000);
  }
  function clock(t) { return new Date(t * 1000).toLocaleTimeString([], {hour12: false}); }
  function family(name) {
    const head = name.split("_")[0];
    return MERGE[head] || head;
  }
  function plotWidth() { return Math.max(300, Math.min(560, Math.floor((document.documentElement.clientWidth - 90) / 2) - 12)); }

  function chamberFor(kind, info) {
    let c = chambers.get(kind);
    if (c) return c;
    const root = el("div", "chamber"), grid = el("div", "grid"), state = el("div", "state"), note = el("div", "note");
    root.dataset.chamber = kind;
    root.append(el("h2", null, kind + (info.config ? " (" + info.config + ")" : "") + " \\u2014 time axis: wall clock"),
                note, state, grid);
    document.getElementById("chambers").append(root);
    c = {root: root, state: state, note: note, grid: grid, t: [], cols: {}, groups: []};
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
      box.append(title); grid.append(box);
      const unit = f.unit;
      const opts = {
        width: plotWidth(), height: 170,
        scales: {x: {time: true}},
        cursor: {sync: {key: "chamber-" + kind}},
        legend: {live: true},
        series: [{label: "time", value: function (u, v) { return v == null ? "\\u2013" : clock(v); }}].concat(
          f.names.map(function (n, i) {
            return {label: n, stroke: COLORS[i % COLORS.length], width: 1.4, spanGaps: false,
                    value: function (u, v) { return fmt(v) + " " + unit; }};
          })),
        axes: [{label: "time (" + kind + ")", labelSize: 18},
               {label: unit, labelSize: 18, size: 64, values: function (u, ticks) { return ticks.map(fmt); }}],
      };
      const plot = new uPlot(opts, [[]].concat(f.names.map(function () { return []; })), box);
      plot.root.querySelectorAll("canvas").forEach(function (cv) { cv.dataset.sensor = kind + "/" + f.names[0]; });
      window.livePlots[kind + "/" + f.name] = plot;
      c.groups.push({plot: plot, names: f.names, unit: unit});
    });
    chambers.set(kind, c);
    return c;
  }
  function clearAll() {
    chambers.forEach(function (c) { c.groups.forEach(function (g) { g.plot.destroy(); }); c.root.remove(); });
    chambers.clear();
    window.livePlots = {};
    lastSeq = 0; plotted = 0; lastRowT = null; pending = []; dirty.clear();
  }
  function addRow(c, row) {
    const n = c.t.length;
    if (n && row.t - c.t[n - 1] > GAP_S) {            // a pause: break the line instead of bridging it
      c.t.push(c.t[n - 1] + 1e-3);
      Object.keys(c.cols).forEach(function (k) { c.cols[k].push(null); });
    }
    c.t.push(row.t);
    Object.keys(c.cols).forEach(function (k) {
      const v = row.values[k];
      c.cols[k].push(v === undefined ? null : v);
    });
    let cut = 0;
    while (cut < c.t.length - 1 && (c.t.length - cut > KEEP_ROWS || row.t - c.t[cut] > KEEP_S)) cut += 1;
    if (cut) { c.t.splice(0, cut); Object.keys(c.cols).forEach(function (k) { c.cols[k].splice(0, cut); }); }
  }
  function flush() {
    flush.scheduled = false;
    dirty.forEach(function (c) {
      c.groups.forEach(function (g) { g.plot.setData([c.t.slice()].concat(g.names.map(function (n) { return c.cols[n].slice(); }))); });
    });
    dirty.clear();
    const now = Date.now() / 1000;
    pending.forEach(function (t) { window.liveLatencies.push(now - t); });
    if (window.liveLatencies.length > 20000) window.liveLatencies.splice(0, 10000);
    plotted += pending.length; pending = [];
    document.getElementById("rows").textContent = String(plotted);
    document.body.dataset.rowsPlotted = String(plotted);
    document.body.dataset.lastSeq = String(lastSeq);
    showUpdated();
  }
  function schedule() {
    if (!flush.scheduled) { flush.scheduled = true; setTimeout(flush, 16); }
  }
  function showUpdated() {
    const u = document.getElementById("updated");
    if (lastRowT === null) { u.textContent = "no rows yet"; return; }
    const ago = Math.max(0, Date.now() / 1000 - lastRowT);
    u.textContent = "last row " + clock(lastRowT) + " (" + (ago < 10 ? ago.toFixed(1) : Math.round(ago)) + " s ago)";
  }
  function setStale(stale, why) {
    const s = document.getElementById("status");
    document.body.classList.toggle("stale", stale);
    document.body.dataset.stale = stale ? "1" : "0";
    s.textContent = stale ? why : "live";
  }
  function claimLine(snap) {
    const st = snap.stage, c = snap.claim;
    document.getElementById("stage").textContent = st
      ? st.name + (st.total ? " " + st.done + "/" + st.total : "") + (st.note ? " (" + st.note + ")" : "")
      : "\\u2013";
    const box = document.getElementById("claim-text");
    box.textContent = "";
    if (!c) { box.textContent = "none yet"; return; }
    box.append(el("b", null, c.id));
    const parts = [c.component, c.parameter].filter(Boolean).join(", ");
    if (parts) box.append(" (" + parts + ")");
    if (c.bound) { box.append(" \\u00b7 "); box.append(el("span", "k", "bound ")); box.append(c.bound); }
    const r = c.result;
    if (r && r.value !== null && r.value !== undefined) {
      box.append(" \\u00b7 "); box.append(el("span", "k", "measured "));
      box.append(r.value + (r.u !== null && r.u !== undefined ? " \\u00b1 " + r.u : "") + " " + (r.unit || ""));
    }
    if (r && r.verdict) {
      box.append(" \\u00b7 "); box.append(el("span", "k", "verdict "));
      box.append(el("span", "verdict " + r.verdict, r.verdict));
      if (r.source) box.append(" (" + r.source + ")");
    }
    box.append(" \\u00b7 " + (c.chamber ? "on " + c.chamber + ": " : "") + c.activity);
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
        "  | rows measured: " + info.rows;
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
    claimLine(snap);
    schedule();
  }
  function connect() {
    const source = new EventSource("live/stream");
    source.addEventListener("open", function () { lastMsg = Date.now(); stopped = false; setStale(false); });
    source.addEventListener("error", function () {
      stopped = true;
      setStale(true, "stream stopped \\u2014 showing the last data; reconnecting");
    });
    source.addEventListener("update", function (e) { lastMsg = Date.now(); stopped = false; setStale(false); update(JSON.parse(e.data)); });
    source.addEventListener("ping", function (e) {
      lastMsg = Date.now(); stopped = false; setStale(false);
      const p = JSON.parse(e.data);
      if (startId !== null && p.start_id !== startId) { clearAll(); restarts += 1; startId = p.start_id; }
    });
  }
  setInterval(function () {
    showUpdated();
    if (!stopped && Date.now() - lastMsg > STALE_AFTER_S * 1000) setStale(true, "no news from the service for " +
      Math.round((Date.now() - lastMsg) / 1000) + " s");
  }, 1000);
  window.addEventListener("resize", function () {
    chambers.forEach(function (c) { c.groups.forEach(function (g) { g.plot.setSize({width: plotWidth(), height: 170}); }); });
  });
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
