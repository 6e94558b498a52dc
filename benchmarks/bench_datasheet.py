#!/usr/bin/env python3
"""Datasheet tools beside their references, in one run: tables vs pymupdf4llm, build vs get_text, search latency,
and table cell recall on the ICDAR-2013 ground truth.

pymupdf4llm runs only in a separate virtualenv (default .venv-bench beside the project, created on first use with
`python -m venv .venv-bench && .venv-bench/bin/pip install pymupdf==2.0 pymupdf4llm==2.0`) as a subprocess, so its
layout engine never changes this process. Figures it cannot produce are reported as null with a reason.

    python benchmarks/bench_datasheet.py [--json] [--no-reference] [--bench-venv DIR] [--icdar-limit N] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

import numpy as np  # noqa: E402
import pymupdf  # noqa: E402
import yaml  # noqa: E402

from agent.datasheet.manifest import build_datasheet  # noqa: E402
from agent.datasheet.normalise import fold  # noqa: E402
from agent.datasheet.tables import page_tables  # noqa: E402
from agent.datasheet.tools import DatasheetSession  # noqa: E402
from bench_cli import shared_dir  # noqa: E402

DATASHEETS = {"dps310": "DPS310.pdf", "si115x": "Si115x.pdf", "acs70331": "ACS70331.pdf", "a4988": "A4988.pdf"}
# Table pages of the claims' values (same as tests/test_datasheet_claims.py, checked against the PDF text layer).
TABLE_PAGE = {
    "dps310-pressure-precision-high": 9, "dps310-pressure-temp-sensitivity": 9, "dps310-temperature-accuracy": 8,
    "dps310-current-1hz-low-precision": 7, "dps310-supply-voltage-vdd": 6, "dps310-meas-time-standard": 9,
    "dps310-pressure-rate-range": 9, "dps310-pressure-data-resolution": 9, "dps310-operating-range": 6,
    "si115x-operating-temperature": 47, "si115x-supply-voltage-vdd": 47, "si115x-standby-current-1v8": 47,
    "si115x-active-current-3v3": 48, "si115x-processing-time": 48, "si115x-vis-response-525nm": 49,
    "si115x-supply-ripple": 47, "acs70331-bandwidth": 5, "acs70331-supply-current-max": 5, "acs70331-rise-time": 5,
    "acs70331-primary-resistance-qfn": 5, "acs70331-saturation-low": 5, "a4988-logic-supply-voltage-range": 4,
    "a4988-load-supply-voltage-range": 4, "a4988-output-on-resistance": 4, "a4988-body-diode-forward-voltage": 4,
    "a4988-logic-supply-current-max": 4, "a4988-logic-input-hysteresis": 4, "a4988-blank-time": 4,
    "a4988-fixed-off-time": 4, "a4988-thermal-shutdown-temperature": 4, "a4988-operating-ambient-temperature": 2,
    "a4988-storage-temperature": 2, "a4988-reference-input-voltage-range": 4,
}
# Long datasheets: their electrical-characteristics pages (PROVENANCE.md) plus spread pages.
LONG = {
    "ATmega328P_42735A.pdf": [50, 150, 250, 367, 368],
    "ATtiny25-45-85_2586Q.pdf": [40, 100, 161, 162, 200],
    "PIC16F87XA_DS39582B.pdf": [20, 100, 177, 178, 200],
}

WORKER = r"""
import json, sys, time, io, contextlib
job = json.load(open(sys.argv[1]))
out = {"pages": []}
with contextlib.redirect_stdout(io.StringIO()):
    import pymupdf4llm
    pymupdf4llm.to_markdown(job["warmup"], pages=[0])
    for pdf, page in job["pages"]:
        t = time.perf_counter()
        md = pymupdf4llm.to_markdown(pdf, pages=[page - 1])
        out["pages"].append({"pdf": pdf, "page": page, "s": time.perf_counter() - t, "markdown": md})
json.dump(out, open(sys.argv[2], "w"))
"""


def ensure_bench_venv(venv: Path) -> Path | None:
    py = venv / "bin" / "python"
    if py.exists():
        return py
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "pymupdf==2.0", "pymupdf4llm==2.0"], check=True, capture_output=True
        )
    except (subprocess.CalledProcessError, OSError) as exc:
        sys.stderr.write(f"could not create {venv}: {exc}\n")
        return None
    return py


def run_reference(py: Path, pages: list[tuple[str, int]]) -> tuple[dict | None, str | None]:
    with tempfile.TemporaryDirectory() as tmp:
        job, result = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job.write_text(json.dumps({"warmup": pages[0][0], "pages": pages}))
        r = subprocess.run([str(py), "-c", WORKER, str(job), str(result)], capture_output=True, text=True)
        if r.returncode != 0 or not result.exists():
            return None, f"pymupdf4llm worker failed: {r.stderr.strip()[-400:]}"
        return json.loads(result.read_text()), None


def claims(shared: Path) -> list[dict]:
    out = []
    for name in ("claims.yaml", "claims_a4988.yaml"):
        out += yaml.safe_load((shared / "paper-archive" / "data" / name).read_text())["claims"]
    return [c for c in out if c["id"] in TABLE_PAGE]


def icdar_recall(root: Path, limit: int | None) -> dict:
    """Share of ground-truth cells (primary -str.xml files) whose folded text equals one of our cells on that page."""
    found = total = 0
    files = sorted(p for p in root.glob("competition-dataset-*/*-str.xml") if not p.stem[:-4].endswith("b"))
    files = files[:limit] if limit else files
    t0 = time.perf_counter()
    pages_done = 0
    for xml in files:
        pdf = xml.with_name(xml.name.replace("-str.xml", ".pdf"))
        if not pdf.exists():
            pdf = xml.with_name(xml.name.replace("b-str.xml", "a.pdf").replace("-str.xml", "a.pdf"))
        if not pdf.exists():
            continue
        doc = pymupdf.open(pdf)
        cache: dict[int, set[str]] = {}
        for region in ET.parse(xml).getroot().iter("region"):
            page = int(region.get("page"))
            if page not in cache:
                cells: set[str] = set()
                for t in page_tables(doc[page - 1]):
                    for row in [t.header] + t.rows:
                        cells.update(fold(c) for c in row if c)
                cache[page] = cells
                pages_done += 1
            for cell in region.iter("cell"):
                text = fold(cell.findtext("content") or "")
                if not text:
                    continue
                total += 1
                found += text in cache[page]
        doc.close()
    return {
        "icdar_cell_recall": found / total if total else None,
        "icdar_cells": total,
        "icdar_files": len(files),
        "icdar_s_per_page": (time.perf_counter() - t0) / max(1, pages_done),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-reference", action="store_true", help="skip pymupdf4llm")
    ap.add_argument("--bench-venv", type=Path, default=PROJECT / ".venv-bench")
    ap.add_argument("--icdar-limit", type=int, default=None, help="only the first N ground-truth files")
    ap.add_argument("--repeat", type=int, default=3, help="runs of get_text/build per document (fastest kept)")
    args = ap.parse_args()
    shared = shared_dir()
    ds_dir, long_dir = shared / "datasheets", shared / "long-datasheets"
    res: dict = {}

    # ---------------------------------------------------------------- tables: ours vs pymupdf4llm, same pages
    cl = claims(shared)
    pages: list[tuple[str, int]] = sorted(
        {(str(ds_dir / DATASHEETS[c["id"].split("-")[0]]), TABLE_PAGE[c["id"]]) for c in cl}
    )
    pages += [(str(long_dir / f), p) for f, ps in LONG.items() if (long_dir / f).exists() for p in ps]
    ours: dict[tuple[str, int], str] = {}
    times = []
    docs = {}
    for pdf, page in pages:
        doc = docs.setdefault(pdf, pymupdf.open(pdf))
        t = time.perf_counter()
        ours[(pdf, page)] = "\n\n".join(tb.to_markdown() for tb in page_tables(doc[page - 1]))
        times.append(time.perf_counter() - t)
    res["table_pages"] = len(pages)
    res["table_s_per_page"] = statistics.mean(times)

    def needles(md_of) -> tuple[int, int, int]:
        total = lit = folded = 0
        for c in cl:
            md = md_of((str(ds_dir / DATASHEETS[c["id"].split("-")[0]]), TABLE_PAGE[c["id"]]))
            for n in c["value_contains"]:
                total += 1
                lit += n in md
                folded += fold(n) in fold(md)
        return total, lit, folded

    res["needles_total"], res["needles_found"], res["needles_found_folded"] = needles(lambda k: ours[k])
    res["pymupdf4llm_s_per_page"] = res["pymupdf4llm_needles_found"] = res["pymupdf4llm_needles_found_folded"] = None
    res["pymupdf4llm_reason"] = None
    if args.no_reference:
        res["pymupdf4llm_reason"] = "skipped (--no-reference)"
    else:
        py = ensure_bench_venv(args.bench_venv)
        ref, why = run_reference(py, pages) if py else (None, f"no bench venv at {args.bench_venv}")
        if ref is None:
            res["pymupdf4llm_reason"] = why
        else:
            theirs = {(r["pdf"], r["page"]): r["markdown"] for r in ref["pages"]}
            res["pymupdf4llm_s_per_page"] = statistics.mean(r["s"] for r in ref["pages"])
            _, res["pymupdf4llm_needles_found"], res["pymupdf4llm_needles_found_folded"] = needles(lambda k: theirs[k])
            res["table_speedup"] = res["pymupdf4llm_s_per_page"] / res["table_s_per_page"]

    # ---------------------------------------------------------------- build_datasheet vs plain get_text
    # Each document: plain get_text() and build_datasheet() alternately, --repeat times, fastest of each kept (other
    # processes on a shared machine only ever add time, so the minimum is the least disturbed figure).
    build_s = get_text_s = 0.0
    per_doc = {}
    for pdf in [ds_dir / f for f in DATASHEETS.values()] + [long_dir / f for f in LONG]:
        if not pdf.exists():
            continue
        g = b = float("inf")
        for _ in range(max(1, args.repeat)):
            t = time.perf_counter()
            with pymupdf.open(pdf) as d:
                for p in d:
                    p.get_text()
            g = min(g, time.perf_counter() - t)
            t = time.perf_counter()
            build_datasheet(pdf)
            b = min(b, time.perf_counter() - t)
        build_s += b
        get_text_s += g
        per_doc[pdf.name] = {"build_s": round(b, 3), "get_text_s": round(g, 3), "ratio": round(b / g, 2)}
    res["build_s"], res["get_text_s"] = build_s, get_text_s
    res["build_ratio"] = build_s / get_text_s if get_text_s else None
    res["build_per_doc"] = per_doc
    res["build_repeat"] = max(1, args.repeat)

    # ---------------------------------------------------------------- search latency on a 234-page document
    long_pdf = long_dir / "ATtiny25-45-85_2586Q.pdf"
    if long_pdf.exists():
        rng = np.random.default_rng(20261201)
        with DatasheetSession(long_pdf) as s:
            words = [w for pg in s.loaded.pages for ln in pg.lines for w in ln.text.split() if len(w) > 3]
            queries = [words[i] for i in rng.integers(0, len(words), 60)]
            queries += [" ".join(words[i : i + 3]) for i in rng.integers(0, len(words) - 3, 30)]
            queries += ["-40 °C", "Supply Current", "no such phrase anywhere", "1.8 V", "ADC Conversion Time"]
            lat = []
            for q in queries:
                t = time.perf_counter()
                s.search(q)
                lat.append((time.perf_counter() - t) * 1000)
        res["search_pages"] = 234
        res["search_queries"] = len(lat)
        res["search_p50_ms"] = float(np.percentile(lat, 50))
        res["search_p95_ms"] = float(np.percentile(lat, 95))
    else:
        res["search_p50_ms"] = None

    # ---------------------------------------------------------------- ICDAR-2013 cell recall
    icdar = shared / "icdar2013"
    res.update(icdar_recall(icdar, args.icdar_limit) if icdar.exists() else {"icdar_cell_recall": None})

    if args.json:
        print(json.dumps(res))
    else:
        ref = res["pymupdf4llm_s_per_page"]
        print(f"tables, {res['table_pages']} pages: ours {res['table_s_per_page'] * 1000:.1f} ms/page"
              f" | pymupdf4llm {'%.0f ms/page' % (ref * 1000) if ref else 'n/a (' + str(res['pymupdf4llm_reason']) + ')'}")
        print(f"needles (literal/folded) of {res['needles_total']}: ours {res['needles_found']}/"
              f"{res['needles_found_folded']} | pymupdf4llm {res['pymupdf4llm_needles_found']}/"
              f"{res['pymupdf4llm_needles_found_folded']}")
        print(f"build_datasheet {res['build_s']:.2f} s vs get_text {res['get_text_s']:.2f} s "
              f"(ratio {res['build_ratio']:.2f}, fastest of {res['build_repeat']} runs each)")
        for name, d in per_doc.items():
            print(f"   {name}: build {d['build_s']} s, get_text {d['get_text_s']} s, ratio {d['ratio']}")
        print(f"search p50 {res['search_p50_ms']:.2f} ms, p95 {res['search_p95_ms']:.2f} ms "
              f"({res['search_queries']} queries, 234 pages)")
        print(f"ICDAR-2013 cell recall {res['icdar_cell_recall']:.3f} over {res['icdar_cells']} cells "
              f"({res['icdar_files']} files, {res['icdar_s_per_page'] * 1000:.0f} ms/page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
