"""The report's two renderings of one list of blocks: Markdown (report.md) and HTML (report.html, figures inline SVG).

Why the HTML marks every number: a browser squeezing a wide table breaks a cell wherever it may, and a number
broken mid-digit ("-254 / .744") reads as two numbers. Cells that are a number (with its ± u and unit) carry the
class `num` (no wrapping, tabular digits); numbers inside prose cells are wrapped in a no-wrap span; headers break
only between words. Prose still wraps at spaces, so a table still fits the page.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from agent.scoring.report_figures import VERDICT_COLOURS, inline_svg
from agent.scoring.report_format import cell

Block = tuple  # ("h1"|"h2"|"p", text) | ("ul", [text]) | ("table", header, rows) | ("fig", caption, path)

VERDICTS = ("pass", "fail", "inconclusive", "error")
_NUM = r"[-+−]?(?:\d+(?:[.,]\d+)*|\.\d+)(?:e[-+]?\d+)?"
#: a cell that is one number, optionally ± another and a unit ('945.256 ± 0.025 hPa', '-254.744 hPa', '3/4', '∞');
#: a dash is not a number
NUMERIC_CELL = re.compile(rf"(?:{_NUM}(?:\s*(?:±|/)\s*{_NUM})?(?:\s*%|\s+[^\s\d;,]{{1,16}})?|∞)")
#: a number inside prose, with its ± part: kept on one line
_NUMBER_IN_TEXT = re.compile(rf"(?<![\w.#&;]){_NUM}(?:\s±\s{_NUM})?(?![\w])")

_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0;table-layout:auto;max-width:100%}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;"
        "overflow-wrap:break-word;word-break:normal;hyphens:manual}"
        "th{background:#f3f3f3;overflow-wrap:normal}"
        "td.num,.n{white-space:nowrap;font-variant-numeric:tabular-nums}td.num{text-align:right}"
        "figure{margin:1.2em 0}figcaption{font-size:14px;color:#444;margin-top:.3em}"
        + "".join(f"td.{v}{{background:{c}}}" for v, c in
                  (("pass", "#dff0d8"), ("fail", "#f2dede"), ("inconclusive", "#fcf8e3"), ("error", "#e8e8e8")))
        + "".join(f".v-{v}{{color:{c};font-weight:600}}" for v, c in VERDICT_COLOURS.items())
        + "@media print{body{max-width:none;margin:0}table{font-size:9pt}figure{page-break-inside:avoid}}")


def is_numeric_cell(text: str) -> bool:
    return bool(NUMERIC_CELL.fullmatch(text.strip()))


def render_markdown(blocks: list[Block], run_dir: Path) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind == "h1":
            out += [f"# {b[1]}", ""]
        elif kind == "h2":
            out += [f"## {b[1]}", ""]
        elif kind == "p":
            out += [b[1], ""]
        elif kind == "ul":
            out += [f"- {item}" if not item.startswith("  ") else item for item in b[1]] + [""]
        elif kind == "table":
            out.append("| " + " | ".join(b[1]) + " |")
            out.append("|" + "---|" * len(b[1]))
            out += ["| " + " | ".join(cell(x).replace("|", "/") for x in row) + " |" for row in b[2]]
            out.append("")
        elif kind == "fig":
            out += [f"![{b[1]}]({Path(b[2]).relative_to(run_dir).as_posix()})", ""]
    return "\n".join(out)


def _inline(text: str) -> str:
    """Escaped text with **bold** and every number kept on one line."""
    parts = html.escape(text).split("**")
    text = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    return _NUMBER_IN_TEXT.sub(lambda m: f"<span class='n'>{m.group(0)}</span>", text)


def _td(x: Any) -> str:
    text = cell(x)
    classes = [c for c in (text if text in VERDICTS else "", "num" if is_numeric_cell(text) else "") if c]
    attr = f" class='{' '.join(classes)}'" if classes else ""
    body = html.escape(text) if "num" in classes else _inline(text)
    return f"<td{attr}>{body}</td>"


def render_html(blocks: list[Block], title: str) -> str:
    body = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>"]
    figures = 0
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{html.escape(b[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline(b[1])}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(
                f"<li style='list-style:circle;margin-left:1.5em'>{_inline(i.strip().removeprefix('- '))}</li>"
                if i.startswith("  ") else f"<li>{_inline(i.strip())}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(_td(x) for x in row) + "</tr>" for row in b[2])
            body.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif kind == "fig":
            figures += 1
            svg = inline_svg(Path(b[2]).read_text(encoding="utf-8"), f"fig{figures}")
            body.append(f"<figure aria-label='{html.escape(b[1])}'>{svg}"
                        f"<figcaption>{_inline(b[1])}</figcaption></figure>")
    body.append("</body></html>")
    return "\n".join(body)
