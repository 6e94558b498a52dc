"""The report's two renderings of one list of blocks: Markdown (report.md) and HTML (report.html, figures inline SVG).

Why the HTML marks every number: a browser squeezing a wide table breaks a cell wherever it may, and a number
broken mid-digit ("-254 / .744") reads as two numbers. Cells that are a number (with its ± U, its k and unit) carry
the class `num` (no wrapping, tabular digits); numbers inside prose cells are wrapped in a no-wrap span; headers
break only between words. Prose still wraps at spaces, so a table still fits the page. A cell that is a claim id
carries the class `id` and never wraps: a browser breaks "nf-f12-pwm-runs-below-20-percent" at every hyphen.

Why contents: the page is long (every verdict, the station, the agent's cells); a ("toc",) block lists the h2 and
h3 headings that follow it with links (an anchor each, the same slug in both renderings: GitHub's for Markdown).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from agent.scoring.report_figures import VERDICT_COLOURS, inline_svg
from agent.scoring.report_format import cell

Block = tuple  # ("h1"|"h2"|"h3"|"p", text) | ("ul", [text]) | ("table", header, rows) | ("fig", caption, path)
#              | ("toc",): the contents, the h2 and h3 headings after it with links

VERDICTS = ("pass", "fail", "inconclusive", "error")
_NUM = r"[-+−]?(?:\d+(?:[.,]\d+)*|\.\d+)(?:e[-+]?\d+)?"
#: a cell that is one number, optionally ± another (or a range, '300 to 1200'), a unit and the k of a U
#: ('945.256 ± 0.080 hPa (k = 3.18)', '-254.744 hPa', '≤ 0.5 updates', '3/4', '∞'); a dash is not a number
NUMERIC_CELL = re.compile(rf"(?:(?:[≤≥=] )?{_NUM}(?:(?:\s*(?:±|/)\s*| to ){_NUM})?(?:\s*%|\s+[^\s\d;,()]{{1,16}})?"
                          rf"(?:\s\(k = {_NUM}\))?|∞)")
#: a cell that is one claim id, as a verdict table labels it ('nf-f12-max-speed-intake', '… (station)')
ID_CELL = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)+(?: \(station\))?")
#: a number inside prose, with its ± part: kept on one line
_NUMBER_IN_TEXT = re.compile(rf"(?<![\w.#&;]){_NUM}(?:\s±\s{_NUM})?(?![\w])")

_CSS = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0;table-layout:auto;max-width:100%}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;"
        "overflow-wrap:break-word;word-break:normal;hyphens:manual}"
        "th{background:#f3f3f3;overflow-wrap:normal}"
        "td.num,.n{white-space:nowrap;font-variant-numeric:tabular-nums}td.num{text-align:right}"
        "td.id{white-space:nowrap}nav.toc{font-size:14px;columns:2}nav.toc ul{margin:.2em 0}"
        "h2,h3{scroll-margin-top:.5em}"
        "figure{margin:1.2em 0}figcaption{font-size:14px;color:#444;margin-top:.3em}"
        + "".join(f"td.{v}{{background:{c}}}" for v, c in
                  (("pass", "#dff0d8"), ("fail", "#f2dede"), ("inconclusive", "#fcf8e3"), ("error", "#e8e8e8")))
        + "".join(f".v-{v}{{color:{c};font-weight:600}}" for v, c in VERDICT_COLOURS.items())
        + "@media print{body{max-width:none;margin:0}table{font-size:9pt}figure{page-break-inside:avoid}}")


def is_numeric_cell(text: str) -> bool:
    return bool(NUMERIC_CELL.fullmatch(text.strip()))


def slug(title: str) -> str:
    """The anchor of a heading, as GitHub makes it (lower case, punctuation dropped, spaces as hyphens), so the
    contents' links work in report.md on a forge and in report.html alike."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def _headings(blocks: list[Block]) -> list[tuple[str, str]]:
    """(level, title) of the h2 and h3 headings after the contents block."""
    after = False
    out = []
    for b in blocks:
        if b[0] == "toc":
            after = True
        elif after and b[0] in ("h2", "h3"):
            out.append((b[0], b[1]))
    return out


def _anchors(blocks: list[Block]) -> dict[int, str]:
    """Each heading's anchor by its block index, made unique as GitHub does (a repeated title gets -1, -2 …)."""
    seen: dict[str, int] = {}
    out = {}
    for i, b in enumerate(blocks):
        if b[0] in ("h2", "h3"):
            base = slug(b[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            out[i] = base if n == 0 else f"{base}-{n}"
    return out


def render_markdown(blocks: list[Block], run_dir: Path) -> str:
    out: list[str] = []
    anchors = _anchors(blocks)
    for i, b in enumerate(blocks):
        kind = b[0]
        if kind == "h1":
            out += [f"# {b[1]}", ""]
        elif kind in ("h2", "h3"):
            out += [f"{'#' * int(kind[1])} {b[1]}", ""]
        elif kind == "toc":
            out += ["**Contents**", ""]
            out += [f"{'  ' if blocks[j][0] == 'h3' else ''}- [{blocks[j][1]}](#{anchors[j]})"
                    for j in sorted(anchors) if j > i] + [""]
        elif kind == "p":
            out += [b[1], ""]
        elif kind == "ul":
            out += [f"- {item}" if not item.startswith("  ") else item for item in b[1]] + [""]
        elif kind == "table":
            out.append("| " + " | ".join(b[1]) + " |")
            out.append("|" + "---|" * len(b[1]))
            out += ["| " + " | ".join(cell(x).replace("|", "\\|") for x in row) + " |" for row in b[2]]
            out.append("")
        elif kind == "fig":
            out += [f"![{b[1]}]({Path(b[2]).relative_to(run_dir).as_posix()})", ""]
    return "\n".join(out)


def _inline(text: str) -> str:
    """Escaped text with **bold** and every number kept on one line."""
    parts = html.escape(text).split("**")
    text = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    return _NUMBER_IN_TEXT.sub(lambda m: f"<span class='n'>{m.group(0)}</span>", text)


def is_id_cell(text: str) -> bool:
    return bool(ID_CELL.fullmatch(text.strip())) and not is_numeric_cell(text)


def _td(x: Any) -> str:
    text = cell(x)
    kind = "num" if is_numeric_cell(text) else "id" if is_id_cell(text) else ""
    classes = [c for c in (text if text in VERDICTS else "", kind) if c]
    attr = f" class='{' '.join(classes)}'" if classes else ""
    body = html.escape(text) if kind else _inline(text)
    return f"<td{attr}>{body}</td>"


def _toc_html(entries: list[tuple[str, str, str]]) -> str:
    """The contents as nested lists: (level, anchor, title) of each heading, h3 nested under the h2 before it."""
    out, nested = ["<ul>"], False
    for n, (level, anchor, title) in enumerate(entries):
        link = f"<a href='#{anchor}'>{html.escape(title)}</a>"
        if level == "h3":
            out.append(("" if nested else "<ul>") + f"<li>{link}</li>")
            nested = True
            continue
        out.append(("</ul>" if nested else "") + ("</li>" if n else "") + f"<li>{link}")
        nested = False
    out.append(("</ul>" if nested else "") + ("</li>" if entries else "") + "</ul>")
    return "".join(out)


def render_html(blocks: list[Block], title: str) -> str:
    body = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>"]
    anchors = _anchors(blocks)
    figures = 0
    for i, b in enumerate(blocks):
        kind = b[0]
        if kind == "h1":
            body.append(f"<h1>{html.escape(b[1])}</h1>")
        elif kind in ("h2", "h3"):
            body.append(f"<{kind} id='{anchors[i]}'>{html.escape(b[1])}</{kind}>")
        elif kind == "toc":
            body.append("<nav class='toc' aria-label='Contents'><b>Contents</b>"
                        + _toc_html([(blocks[j][0], anchors[j], blocks[j][1]) for j in sorted(anchors) if j > i])
                        + "</nav>")
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
