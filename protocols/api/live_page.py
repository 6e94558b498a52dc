"""The live view's web page, served at GET /: one self-contained HTML document (inline CSS and JS, no CDN).

Why self-contained: the lab's machines often reach no CDN, and the page must work wherever the service runs. It
reads `live/stream` (Server-Sent Events, relative so it also works behind a path prefix), draws one small canvas
per sensor with the latest rows, shows each chamber's inputs and the claim in use. For tests and operators it
exposes what it drew: `data-rows-plotted` and `data-last-seq` on <body>, and the row count in #rows.
Why a Python string and not an .html file: the package data of the project ships YAML/JSON only.
"""

LIVE_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>chamberlab live view</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; }
 h1 { font-size: 1.3em; margin: 0 0 .4em; }
 #status { color: #666; } #status.down { color: #b00; }
 #claim { padding: .5em .8em; background: #f3f6fa; border-left: 4px solid #3a6ea5; margin: .6em 0; }
 .chamber { margin: 1em 0; } .chamber h2 { font-size: 1.1em; margin: .3em 0; }
 .state { color: #444; font-family: monospace; margin-bottom: .4em; }
 .grid { display: flex; flex-wrap: wrap; gap: 8px; }
 .plot { border: 1px solid #ddd; padding: 2px 4px; }
 .plot .label { font-size: 12px; font-family: monospace; white-space: nowrap; }
 canvas { display: block; }
</style>
</head>
<body data-rows-plotted="0" data-last-seq="0">
<h1>chamberlab live view</h1>
<div id="status">connecting&hellip;</div>
<div id="claim">claim: <span id="claim-text">none yet</span></div>
<div>rows plotted: <span id="rows">0</span></div>
<div id="chambers"></div>
<script>
"use strict";
(function () {
  const KEEP = 300;                      // points kept per sensor
  const W = 220, H = 64;
  const series = new Map();              // "wt/pressure_upwind" -> {points: [[seq, value]], canvas, label, unit}
  const sections = new Map();            // chamber kind -> {root, state, grid}
  let lastSeq = 0, plotted = 0;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function section(kind, info) {
    let s = sections.get(kind);
    if (!s) {
      const root = el("div", "chamber"), grid = el("div", "grid"), state = el("div", "state");
      root.dataset.chamber = kind;
      root.append(el("h2", null, kind + (info.config ? " (" + info.config + ")" : "")), state, grid);
      document.getElementById("chambers").append(root);
      s = {root: root, state: state, grid: grid};
      sections.set(kind, s);
    }
    return s;
  }
  function plotFor(kind, name, unit) {
    const key = kind + "/" + name;
    let p = series.get(key);
    if (!p) {
      const box = el("div", "plot"), label = el("div", "label", name), canvas = el("canvas");
      canvas.width = W; canvas.height = H; canvas.dataset.sensor = key;
      box.append(label, canvas);
      section(kind, {}).grid.append(box);
      p = {points: [], canvas: canvas, label: label, unit: unit || "", name: name};
      series.set(key, p);
    }
    return p;
  }
  function fmt(v) {
    if (v === null) return "unset";
    const a = Math.abs(v);
    return (a !== 0 && (a >= 1e5 || a < 1e-3)) ? v.toExponential(3) : String(Math.round(v * 1000) / 1000);
  }
  function draw(p) {
    const ctx = p.canvas.getContext("2d");
    ctx.clearRect(0, 0, W, H);
    const pts = p.points.filter(function (q) { return q[1] !== null; });
    const last = p.points.length ? p.points[p.points.length - 1][1] : null;
    p.label.textContent = p.name + " = " + fmt(last) + (p.unit ? " " + p.unit : "");
    if (pts.length === 0) return;
    let lo = Infinity, hi = -Infinity;
    for (const q of pts) { if (q[1] < lo) lo = q[1]; if (q[1] > hi) hi = q[1]; }
    if (hi === lo) { hi += 0.5; lo -= 0.5; }
    const s0 = p.points[0][0], s1 = Math.max(p.points[p.points.length - 1][0], s0 + 1);
    ctx.strokeStyle = "#3a6ea5"; ctx.lineWidth = 1.2; ctx.beginPath();
    pts.forEach(function (q, i) {
      const x = 2 + (W - 4) * (q[0] - s0) / (s1 - s0), y = H - 3 - (H - 6) * (q[1] - lo) / (hi - lo);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
  function update(snap) {
    if (snap.seq < lastSeq) {             // the service restarted: start afresh
      series.forEach(function (p) { p.points = []; });
      lastSeq = 0;
    }
    const units = {};
    Object.keys(snap.chambers).forEach(function (kind) {
      const info = snap.chambers[kind], s = section(kind, info);
      const state = Object.keys(info.state || {}).map(function (k) { return k + "=" + info.state[k]; });
      s.state.textContent = "inputs: " + (state.length ? state.join(", ") : "(none set)") +
        "  | rows measured: " + info.rows;
      (info.sensors || []).forEach(function (v) { units[kind + "/" + v.name] = v.unit; });
    });
    const touched = new Set();
    for (const row of snap.rows) {
      if (row.seq <= lastSeq) continue;
      for (const name of Object.keys(row.values)) {
        const key = row.chamber + "/" + name, p = plotFor(row.chamber, name, units[key]);
        p.points.push([row.seq, row.values[name]]);
        if (p.points.length > KEEP) p.points.splice(0, p.points.length - KEEP);
        touched.add(p);
      }
      lastSeq = row.seq;
      plotted += 1;
    }
    lastSeq = Math.max(lastSeq, snap.seq);
    touched.forEach(draw);
    const c = snap.claim;
    document.getElementById("claim-text").textContent = c
      ? c.id + " (" + [c.component, c.parameter].filter(Boolean).join(", ") + ") on " + (c.chamber || "?") +
        ": " + c.activity
      : "none yet";
    document.getElementById("rows").textContent = String(plotted);
    document.body.dataset.rowsPlotted = String(plotted);
    document.body.dataset.lastSeq = String(lastSeq);
  }
  const status = document.getElementById("status");
  const source = new EventSource("live/stream");
  source.addEventListener("open", function () { status.textContent = "live"; status.className = ""; });
  source.addEventListener("error", function () {
    status.textContent = "connection lost; reconnecting"; status.className = "down";
  });
  source.addEventListener("update", function (e) { update(JSON.parse(e.data)); });
})();
</script>
</body>
</html>
"""
