"""The simulator's commands: serve an emulated Mk1 board until stopped, fit parameters to a recorded CSV, and show
the parameters of one unit (issue 34: `units_job`, rendered by `units_text`).

Why here: both read a parameter file with the one settings reader (chamber.selection.read_params, YAML or JSON,
checked against the simulator's model), drive simulator/ below and write their output whole (protocols.files);
the CLI only parses and renders. `fit_text` is the fit's text rendering.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from chamber.errors import ChamberError
from protocols.files import check_output_path, write_json_file


class FaultsError(ChamberError, ValueError):
    """A --faults value that is not a JSON object of BoardFaults fields."""


def serve_board(*, chamber: str, config: str, transport: str, seed: int, params: Path | None, faults: str | None,
                pace: str, window: int, host: str, listen_port: int, on_ready: Callable[[dict[str, Any]], None],
                say: Callable[[str], None]) -> None:
    """Serve an emulated board until SIGINT/SIGTERM; `on_ready` gets its URL and settings before serving."""
    import signal
    import threading

    from chamber.selection import read_params
    from simulator.board import make_board
    from simulator.board_protocol import BoardFaults

    try:
        switches = BoardFaults(**json.loads(faults)) if faults else None
    except (ValueError, TypeError) as exc:
        raise FaultsError(f"--faults: expected a JSON object of BoardFaults fields: {exc}") from exc
    board = make_board(chamber, transport=transport, seed=seed, config=config, params=read_params(params),
                       faults=switches, pace=pace, window=window, host=host, port=listen_port)
    from chamber.stop import STOP_SIGNALS

    stop = threading.Event()
    for signum in STOP_SIGNALS:  # Ctrl-C, SIGTERM, a closed terminal, Ctrl-\: the board stops serving
        signal.signal(signum, lambda *_: stop.set())
    on_ready({"url": board.url, "chamber": chamber, "config": config, "transport": transport, "seed": seed,
              "pace": pace, "window": window, "pid": os.getpid()})
    say(f"emulated {chamber}/{config} board serving on {board.url} (seed {seed}, {pace}); stop with Ctrl-C or "
        "SIGTERM")
    try:
        board.serve(stop)
    finally:
        board.transport.close()


def fit_job(recording: str | Path, output: Path, base: str | Path | None, force: bool = False) -> dict[str, Any]:
    """Fit simulator parameters to a recorded CSV (from `base`, YAML or JSON, if given) and write them to `output`:
    a new file unless `force` (checked before the fit), written whole, and only parameters that `sim serve
    --params` reads back (a fit that produced NaN is refused by the parameter model, not written)."""
    from chamber.selection import read_params
    from simulator.fit import fit_recording
    from simulator.params import dump_params, params_from

    check_output_path(output, force=force, option="-o")
    start = params_from(read_params(base)) if base else None
    result = fit_recording(recording, base=start)
    fitted = dump_params(params_from(dump_params(result.params)))  # validated again: finite, as a reader wants
    write_json_file(Path(output), fitted, force=force)
    return {"output": str(output), "source": result.params.source, "fit": result.report}


def fit_text(d: dict[str, Any]) -> str:
    fit = d["fit"]
    lines = [f"wrote {d['output']} ({fit['layout']}, {fit['rows']} rows)"]
    if "offsets_pa" in fit:
        lines.append(f"barometer offsets, Pa ({fit['offsets_reference']}):")
        lines += [f"  {unit:<9} {value:+8.3f}" for unit, value in fit["offsets_pa"].items()]
        lines.append("noise RMS by oversampling, Pa (pooled over units):")
        lines += [f"  osr {osr}: {value:.3f}" for osr, value in fit["noise_pa_by_osr"].items()]
        for name, why in (fit.get("kept") or {}).items():
            lines.append(f"  {name}: {why}")
    for channel in ("ir", "vis"):
        c = fit.get(channel)
        if c and c.get("fitted"):
            lines.append(f"{channel}: diode gains [{', '.join(f'{g:.3f}' for g in c['diode_gains'])}], t gains "
                         f"[{', '.join(f'{g:.3f}' for g in c['t_gains'])}] ({c['reference']})")
        elif c:
            lines.append(f"{channel}: not fitted ({c['reason']})")
    return "\n".join(lines)


def units_job(kind: str, unit: int) -> dict[str, Any]:
    """Unit `unit` of a `kind` chamber as the simulator serves it (`emulated:KIND?unit=N`): every drawn parameter
    with today's unit's value, its distribution and its source (simulator/units.py UNIT_PARAMETERS)."""
    from simulator.units import describe_unit

    return {"kind": kind, "unit": unit, "url": f"emulated:{kind}" + (f"?unit={unit}" if unit else ""),
            "today": unit == 0, "parameters": describe_unit(kind, unit)}


def units_text(d: dict[str, Any]) -> str:
    """The unit's parameters as a table, then each distinct source once, numbered."""
    sources: list[str] = []
    for row in d["parameters"]:
        if row["source"] not in sources:
            sources.append(row["source"])
    head = f"{d['url']}: " + ("today's unit (serial 0)" if d["today"] else f"unit {d['unit']} of the {d['kind']} chamber")
    width = max(len(r["parameter"]) for r in d["parameters"])
    lines = [head, f"  {'parameter':<{width}}  {'value':>11}  {'today':>11}  {'unit':<10}  distribution  [source]"]
    for row in d["parameters"]:
        lines.append(f"  {row['parameter']:<{width}}  {row['value']:>11.5g}  {row['today']:>11.5g}  {row['unit']:<10}  "
                     f"{row['distribution']}  [{sources.index(row['source']) + 1}]")
    lines.append("sources:")
    lines += [f"  [{i}] {text}" for i, text in enumerate(sources, start=1)]
    return "\n".join(lines)
