#!/usr/bin/env python3
"""The simulator beside the real chamber and the chamber authors' models, figure by figure (issue 14).

For every figure of calibration/real_figures.py FIGURES: the real value (and where it is recorded), the tolerance,
ours on the default parameters (mean ± SD over seeds, computed by running the protocol that recorded the public
dataset and the seed paper's method), the authors' exact models (simulator/params_authors.json, same protocol),
and ours before issue 14 as the issue measured it. Then the units of issue 34 (simulator/units.py): the barometer
offsets of units 1..--units beside the real chamber's four, and each drawn parameter's spread over 1000 units beside
its stated σ.
Usage: python benchmarks/bench_sim_figures.py [--seeds 8] [--units 8] [--shared ../shared] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_cli import shared_dir  # noqa: E402
from simulator.params import authors_params  # noqa: E402
from calibration.real_figures import FIGURES, SEEDS, all_figures  # noqa: E402
from simulator.params import BAROMETERS  # noqa: E402
from simulator.units import REAL_OFFSET_RANGE_PA, REAL_OFFSET_SD_PA, UNIT_PARAMETERS, unit_params  # noqa: E402


D1_FANS_OFF_DW_MINUS_UP_PA = -7.10
"""The authors' model D1's fans-off offset downwind − upwind (issue 14; fitted on wt_bernoulli_v1, another
recording). Not one of FIGURES: the defaults do not reproduce it (simulator/params.py, barometer_offsets_pa says
why), so it is printed beside ours, not gated."""


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, tuple):
        return f"{_fmt(value[0])}–{_fmt(value[1])}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def unit_figures(units: int, spread_units: int = 1000) -> dict:
    """The barometer offsets of units 1..`units` against the real chamber's four (pooled within-unit SD, mean
    within-unit range), and each drawn parameter's sample SD over `spread_units` units against its σ."""
    offsets = np.array([[unit_params("wt", s)["wind_tunnel"]["barometer_offsets_pa"][b] for b in BAROMETERS]
                        for s in range(1, units + 1)])
    spreads = []
    for row in UNIT_PARAMETERS:
        draws = [row.draw(s) for s in range(1, spread_units + 1)]
        spreads.append({"key": row.key, "sigma": row.sigma, "ours": float(np.std(draws, ddof=1)),
                        "clipped": row.low is not None or row.high is not None})
    return {"units": units, "real_offset_sd": REAL_OFFSET_SD_PA, "real_offset_range": REAL_OFFSET_RANGE_PA,
            "offset_sd_pooled": float(np.sqrt(np.mean(np.var(offsets, axis=1, ddof=1)))),
            "offset_range_mean": float(np.mean(np.ptp(offsets, axis=1))), "spread_units": spread_units,
            "spreads": spreads}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS, help="runs of the default parameters (gates use the mean)")
    parser.add_argument("--units", type=int, default=8, help="units whose barometer offsets are compared (issue 34)")
    parser.add_argument("--shared", type=Path, default=None, help="the shared folder (default: CHAMBERLAB_SHARED or ../shared)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    protocols = (args.shared or shared_dir()) / "chamber-data" / "protocols"
    if not protocols.is_dir():
        parser.error(f"{protocols} not found: the figures are computed by running the recorded protocols")

    runs = [all_figures(None, protocols, seed) for seed in range(args.seeds)]
    theirs = all_figures(authors_params(), protocols, seed=0)
    rows = []
    for name, figure in FIGURES.items():
        values = np.array([r[name] for r in runs])
        ours = float(values.mean())
        rows.append(
            {
                "figure": name,
                "unit": figure.unit,
                "real": figure.real,
                "tolerance": figure.tolerance,
                "ours": ours,
                "ours_sd": float(values.std(ddof=1)) if len(values) > 1 else None,
                "ours_ok": figure.accepts(ours),
                "authors": theirs[name],
                "authors_ok": figure.accepts(theirs[name]),
                "before": figure.before,
                "gated": figure.gated,
                "source": figure.source,
                "why": figure.why,
            }
        )
    dw_up = np.array([r["fans_off_dw_minus_up"] for r in runs])
    not_reproduced = {
        "figure": "fans_off_dw_minus_up", "unit": "Pa", "d1": D1_FANS_OFF_DW_MINUS_UP_PA, "ours": float(dw_up.mean()),
        "ours_sd": float(dw_up.std(ddof=1)) if len(dw_up) > 1 else None, "authors": theirs["fans_off_dw_minus_up"],
    }
    units = unit_figures(args.units)
    if args.json:
        print(json.dumps({"seeds": args.seeds, "figures": rows, "not_reproduced": [not_reproduced], "units": units},
                         indent=2))
        return 0 if all(r["ours_ok"] for r in rows if r["gated"]) else 1

    header = f"{'figure':32} {'unit':6} {'real':>15} {'± tol':>8} {'ours (mean ± sd)':>22} {'authors':>11} {'before':>9}"
    print(f"simulator vs real chamber vs authors' models ({args.seeds} seeds; authors: seed 0)")
    print(header)
    print("-" * len(header))
    for r in rows:
        ours = f"{_fmt(r['ours'])} ± {_fmt(r['ours_sd'])}" + (" ✓" if r["ours_ok"] else " ✗")
        authors = _fmt(r["authors"]) + (" ✓" if r["authors_ok"] else " ✗")
        mark = "" if r["gated"] else "  (reported, not gated)"
        print(f"{r['figure']:32} {r['unit']:6} {_fmt(r['real']):>15} {_fmt(r['tolerance']):>8} {ours:>22} {authors:>11} "
              f"{_fmt(r['before']):>9}{mark}")
    gated = [r for r in rows if r["gated"]]
    print(f"\nours within tolerance: {sum(r['ours_ok'] for r in gated)} of {len(gated)} gated figures; "
          f"authors' models: {sum(r['authors_ok'] for r in gated)} of {len(gated)}")
    print(f"not reproduced (not gated): D1's fans-off downwind − upwind {_fmt(D1_FANS_OFF_DW_MINUS_UP_PA)} Pa "
          f"(wt_bernoulli_v1, another recording) vs ours {_fmt(not_reproduced['ours'])} ± "
          f"{_fmt(not_reproduced['ours_sd'])} Pa, authors' models {_fmt(not_reproduced['authors'])} Pa")
    print(f"\nunits 1..{units['units']} (issue 34): barometer offsets' pooled within-unit SD "
          f"{_fmt(units['offset_sd_pooled'])} Pa (real chamber's four: {_fmt(units['real_offset_sd'])} Pa), mean "
          f"within-unit range {_fmt(units['offset_range_mean'])} Pa (real: {_fmt(units['real_offset_range'])} Pa)")
    print(f"each drawn parameter's SD over {units['spread_units']} units vs its stated σ (clipped ones: the clip "
          "narrows it):")
    for r in units["spreads"]:
        clipped = "  (clipped at its bound)" if r["clipped"] else ""
        print(f"  {r['key']:32} σ {_fmt(r['sigma']):>8}  ours {_fmt(r['ours']):>8}{clipped}")
    return 0 if all(r["ours_ok"] for r in gated) else 1


if __name__ == "__main__":
    raise SystemExit(main())
