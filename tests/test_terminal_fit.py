"""Issue 35, item 4: every line the CLI prints fits the terminal (wrapped with an indent, never cut mid-number),
piped output keeps whole lines; elapsed keeps moving during a long step, an ETA is "?" when unknown and counts
down when given; `chamber run`'s elapsed equals its summary's. Item 5's rule (a part skipped whole is short only
when asked for by name) and the review item (the main job uses the station results it holds) are here too.

Why these: the issue saw summaries of 118-218 characters broken mid-number at 80 columns ("bytes_sent 18|0162"),
a 153-character opening line, "31/53 ETA 0:01" for 10 s, nothing moving during a 7-15 s cell, and a progress line
saying 0:12 where the summary said 16.1 s. The last tests run the real commands in a pseudo-terminal of 80 columns
(TIOCSWINSZ; COLUMNS unset, so the width is the terminal's own) and read everything they wrote.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import bench_cli
from conftest import shared_path
from firmware_bridge.progress_line import (ProgressLine, clock_text, fit_line, fit_text, output_width, wrap_parts)

ROOT = Path(bench_cli.__file__).resolve().parent
NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
LINK = {"resends": 0, "needless_resends": 0, "crc_failures": 0, "ack_timeouts": 0, "duplicates": 0,
        "unexpected": 0, "segments_sent": 6457, "segments_received": 6457, "bytes_sent": 180162,
        "bytes_received": 564586, "error_reports": 0, "reconnects": 0}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def segments(written: str) -> list[str]:
    """What a terminal shows line by line: every part between two newlines or carriage returns."""
    return [part for line in written.split("\n") for part in line.split("\r")]


def split_numbers(lines: list[str]) -> list[tuple[str, str]]:
    """Pairs of lines where a number was split: a line ending in a digit followed by an indented continuation
    starting with one (a wrapped line goes on indented; a new line or row does not start with spaces)."""
    return [(a, b) for a, b in zip(lines, lines[1:])
            if re.search(r"[\d.]$", a.rstrip()) and b.startswith(" ") and re.match(r"[\d.]", b.lstrip())]


# ---------------------------------------------------------------------------------------------- the rule
def test_parts_are_broken_between_parts_only_and_continue_under_the_values():
    parts = [f"{k} {v}" for k, v in LINK.items()]
    lines = wrap_parts(parts, 80, head="link wt:    ")
    assert len(lines) > 1 and max(len(x) for x in lines) <= 79
    assert all(x.startswith(" " * 12) and not x.startswith(" " * 13) for x in lines[1:])
    rejoined = " ".join(x.strip() for x in lines).removeprefix("link wt: ").strip()
    assert rejoined.split(", ") == parts  # every part whole, in order, once
    assert "bytes_sent 180162" in "\n".join(lines)
    assert wrap_parts(parts, None, head="link wt:    ") == ["link wt:    " + ", ".join(parts)]  # piped: whole


def test_a_part_longer_than_a_line_is_broken_at_its_spaces_never_inside_a_number_or_a_value():
    part = "detector flags 0 of 49 (one-sided 95 % upper bound 0.059; unit: fidelity-passing cells)"
    lines = wrap_parts(["fidelity 49 of 49 cells", part, "engine errors 0"], 50, head="scores:     ", sep="; ")
    assert max(len(x) for x in lines) <= 49
    assert not split_numbers(lines)
    text = " ".join(lines)
    assert "95 %" in text and "0.059;" in text and "fidelity-passing" in text
    wrapped = fit_line("nf-f12-pwm-runs-below-20-percent-intake measured 945.255 ± 0.025 hPa, c = 0.025 "
                       "with the claim's bound moved " * 3, 50)
    assert max(len(x) for x in wrapped) <= 49 and len(wrapped) > 3
    joined = "\n".join(wrapped)
    assert joined.count("nf-f12-pwm-runs-below-20-percent-intake") == 3  # never broken at a hyphen
    assert joined.count("945.255 ± 0.025") == 3 and joined.count("c = 0.025") == 3  # "x ± u", "c = x" whole
    # a word longer than a line of its own (a path, an id) is broken after a hyphen or slash, never in a number
    long = fit_line("results:    /home/someone/chamberlab/runs/20261205T091656Z/cells/dps310-operating-range", 30)
    assert max(len(x) for x in long) <= 29 and not split_numbers(long)
    assert "".join(x.strip() for x in long[1:]).startswith("/home/someone/") and "20261205T091656Z" in "".join(long)


def test_piped_or_in_a_file_nothing_is_wrapped():
    long = "x " * 200
    assert fit_text(long, None) == long
    assert output_width(io.StringIO()) is None  # not a terminal: whole lines


def summary() -> dict[str, Any]:
    """A `run` summary as the job returns it (the shape of the issue's 80-column session)."""
    return {"run_id": "20261205T091656Z", "run_dir": "/home/someone/chamberlab/runs/20261205T091656Z",
            "backend": "emulated boards on ptys", "seconds": 86.2, "status": "finished",
            "verdicts": {"inconclusive": 39, "pass": 14},
            "sweep": {"claim_id": "dps310-operating-range", "combined_uncertainty": "0.025",
                      "measured": {"value": "945.255", "u": "0.025", "unit": "hPa"},
                      "verdict_changes_at": ["945.280", "945.230"]},
            "station": {"definitive": ["a"] * 19, "verdicts": {"inconclusive": 34, "pass": 19}},
            "link": {"wt": LINK, "lt": {**LINK, "segments_sent": 741, "bytes_sent": 18518}},
            "agent": {"model": "scripted:reader", "cells": 49, "kept_from_earlier": 0, "outcomes": {"submitted": 49},
                      "fidelity_and_flags": {"fidelity_passed": 49, "cells": 49, "engine_errors": 0,
                                             "latency_per_cell_mean_s": 1.24,
                                             "flagged": {"count": 0, "n": 49, "upper_95": 0.059,
                                                         "unit": "fidelity-passing cells"}}},
            "report": "/home/someone/chamberlab/runs/20261205T091656Z/report.md"}


@pytest.mark.parametrize("width", [80, 60, 120])
def test_run_summary_fits_the_width_and_keeps_every_number_whole(width):
    from agent.main_job import summary_text

    whole = summary_text(summary(), None)
    fitted = summary_text(summary(), width)
    assert max(len(x) for x in whole.splitlines()) > 200  # piped: the long lines stay whole (one per key)
    lines = fitted.splitlines()
    assert max(len(x) for x in lines) <= width - 1, max(lines, key=len)
    assert not split_numbers(lines)
    assert sorted(NUMBER.findall(fitted)) == sorted(NUMBER.findall(whole))  # the same numbers, none split
    keys = [x.split(":")[0] for x in lines if x and not x.startswith(" ")]
    assert keys == [x.split(":")[0] for x in whole.splitlines() if x]  # a key starts each line, as piped


def test_check_table_at_80_columns_keeps_claim_and_verdict_columns_and_piped_is_one_row_a_line():
    from protocols.check_job import check_table_text

    rows = [{"claim_id": "dps310-operating-range", "verdict": "pass", "class": None, "matched_conditions": [1, 2],
             "unmatched_conditions": [], "measured": {"value": "945.255", "u": "0.025", "unit": "hPa", "k": 3.18}},
            {"claim_id": "dps310-absolute-accuracy", "verdict": "inconclusive", "class": "no-traceable-reference",
             "matched_conditions": [], "unmatched_conditions": [1], "measured": None}]
    narrow = check_table_text(rows, 80).splitlines()
    assert max(len(x) for x in narrow) <= 79 and not split_numbers(narrow)
    starts = [x for x in narrow if x.startswith("dps310-")]
    assert [x[:50].split() for x in starts] == [["dps310-operating-range", "pass"],
                                                ["dps310-absolute-accuracy", "inconclusive"]]
    assert "945.255 ± 0.025 hPa, k 3.18," in narrow[2] and narrow[3].strip() == "cond 2/0"
    piped = check_table_text(rows, None).splitlines()
    assert len(piped) == 6 and "no-traceable-reference" in piped[3]  # header, rule, two rows, blank, counts


# ---------------------------------------------------------------------------------------------- the line
def test_a_batch_of_unequal_steps_says_eta_unknown_and_a_given_eta_counts_down():
    clock, screen = Clock(), io.StringIO()
    line = ProgressLine(screen, width=80, tty=True, clock=clock)
    line.start("checks", 53, rate_eta=False)
    clock.now += 1.0
    for _ in range(31):  # the claims that need no chamber are decided at once
        line.advance("quick")
    assert " ETA ? " in line.text()  # not "ETA 0:01" before 10 s of chamber work
    line.update(eta_s=60.0)
    clock.now += 20.0
    assert " ETA 0:40 " in line.text()  # counted down since it was given
    line.update(note="a staging read")  # a note alone keeps the ETA given
    assert " ETA 0:40 " in line.text()
    clock.now += 100.0
    assert " ETA 0:00 " in line.text()  # never below zero


def test_elapsed_moves_during_a_long_step_on_its_own():
    """A step of 15 s with no event: the ticker redraws the line, elapsed moving (the test's clock jumps; the
    ticker's thread draws what that clock says)."""
    clock = Clock()
    drawn = threading.Event()

    class Screen(io.StringIO):
        def write(self, text: str) -> int:
            if "elapsed 0:15" in text:
                drawn.set()
            return super().write(text)

    line = ProgressLine(Screen(), width=80, tty=True, clock=clock, ticks=0.01)
    line.start("agent", 49)
    line.advance("a4988-logic-supply-voltage-range: submitted")
    clock.now += 15.0
    assert drawn.wait(timeout=30), "the ticker never redrew the open stage"
    ticker = line._ticker
    assert ticker is not None and ticker.is_alive()
    line.finish()
    ticker.join(timeout=30)
    assert not ticker.is_alive()  # no stage open: no thread left drawing
    assert ProgressLine(io.StringIO(), tty=True, clock=clock).ticks == 0  # a given clock: no ticker unless asked


def test_chamber_run_progress_says_the_elapsed_its_summary_says():
    """The meter's elapsed is the run's own (chamber.protocol_runner's clock from before the first SET), not
    from its first progress call, so the last progress line and the summary agree."""
    from chamber import open_chamber
    from chamber.operator import RowMeter, protocol_text
    from chamber.protocol_language import parse_protocol
    from chamber.protocol_runner import run_protocol

    protocol = parse_protocol(("SET,load_in,0.3\nWAIT,4000\n" + "MSR,20,0\nWAIT,1500\n" * 3).splitlines(), "p.txt")
    clock, log = Clock(), io.StringIO()

    def wait(seconds: float) -> bool:
        clock.now += seconds
        return False

    chamber = open_chamber(backend="sim", chamber="wt")
    try:
        meter = RowMeter("p", log, tty=False, clock=clock)
        outcome = run_protocol(chamber, protocol, on_frame=lambda f: None, on_progress=meter, wait=wait,
                               clock=clock)
    finally:
        chamber.close()
    last = log.getvalue().splitlines()[-1]
    assert outcome.seconds == pytest.approx(8.5)
    assert f"elapsed {clock_text(outcome.seconds)} " in last, last  # 0:08 (0:04 if counted from the first row)
    d = {**outcome.to_dict(), "output": "p.csv", "safe_state": {"chamber": "wt", "error": None, "applied": {},
                                                                "confirmed": True}}
    assert f"in {clock_text(outcome.seconds)} ({outcome.seconds:.1f} s)" in protocol_text(d, None)


# ---------------------------------------------------------------------------------------------- item 5
def test_a_part_skipped_whole_is_short_only_when_asked_for_by_name():
    from types import SimpleNamespace

    from agent.main_job import shortfall

    claims = [SimpleNamespace(source=SimpleNamespace(prints_figure=True))] * 3
    skipped = {"agent_skipped": "no datasheet in /x (expected DPS310.pdf); fetch them with ...", "error_claims": []}
    assert shortfall(skipped, agent_asked=True, agent_claims=claims, agent_named=False) == {}
    assert shortfall(skipped, agent_asked=True, agent_claims=claims, agent_named=True) == {"cells_not_run": 3}
    partly = {"agent": {"not_run": 1, "outcomes": {"submitted": 2}}, "error_claims": []}  # the part ran, short
    assert shortfall(partly, agent_asked=True, agent_claims=claims, agent_named=False) == {"cells_not_run": 1}
    assert shortfall(skipped, agent_asked=False, agent_claims=claims) == {}  # --no-agent: none asked


# ---------------------------------------------------------------------------------------------- review item
def test_the_main_job_is_handed_the_station_results_it_wrote(tmp_path):
    """The lab part hands its caller the station pass's results as station_checks.json holds them (the main
    job shows them on its live view from memory, not by reading the file back)."""
    from chamber import open_chamber
    from chamber.instruments import sim_station_file
    from protocols.bench_job import run_lab_job
    from protocols.claim_sources import load_main_job_claims
    from protocols.files import json_default

    pool = load_main_job_claims(None)
    claims = [pool[c] for c in ("dps310-absolute-accuracy", "si115x-adc-bit-depth")]
    chambers = {k: open_chamber(backend="sim", chamber=k) for k in ("wt", "lt")}
    handed: list[list[dict[str, Any]]] = []
    try:
        run_lab_job(claims, chambers, tmp_path, rows=8, station_file=sim_station_file(),
                    on_station_verdicts=handed.append)
    finally:
        for c in chambers.values():
            c.close()
    written = json.loads((tmp_path / "station_checks.json").read_text(encoding="utf-8"))["results"]
    assert len(handed) == 1 and json.loads(json.dumps(handed[0], default=json_default)) == written
    assert {r["claim_id"] for r in written} == {c.id for c in claims}


# ---------------------------------------------------------------------------------------------- at 80 columns
def on_a_terminal(cwd: Path, *argv: str, columns: int = 80, timeout: float = 600) -> tuple[int, list[str]]:
    """Run `chamberlab argv` with stdout and stderr on one pseudo-terminal of `columns` columns (TIOCSWINSZ;
    COLUMNS unset: the width is the terminal's own); its exit code and what the terminal showed, segment by
    segment (between newlines and carriage returns), trailing blanks removed (a redraw pads to the width - 1)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench_cli.py"), *argv], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, cwd=cwd, env=env)
    os.close(slave)
    written, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 5.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer has gone
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    code = proc.wait(timeout=60)
    return code, [s.rstrip() for s in segments(written.decode("utf-8", "replace").replace("\r\n", "\n"))]


def assert_fits(shown: list[str], columns: int = 80) -> None:
    wide = [s for s in shown if len(s) > columns - 1]
    assert not wide, wide[:3]
    assert not split_numbers([s for s in shown if s.strip()])


def test_run_at_80_columns_every_line_fits_and_every_number_of_its_summary_is_whole(tmp_path):
    runs = tmp_path / "runs"
    code, shown = on_a_terminal(tmp_path, "run", "--runs-dir", str(runs), "--rows", "8", "--new", "--claims",
                                "dps310-operating-range,si115x-adc-bit-depth,mcp4151-inl-pot-1")
    assert code == 0, "\n".join(shown[-30:])
    assert_fits(shown)
    from agent.main_job import summary_text

    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    d = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    whole = summary_text({**d, "seconds": 0}, None)  # piped: every line whole
    text = "\n".join(shown)
    for number in set(NUMBER.findall(whole)) - {"0"}:
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d.])", text), number
    assert any(s.startswith("link wt:    resends 0,") for s in shown)
    assert any(s.startswith("checks 3/3 (100 %) elapsed ") for s in shown)


def test_check_all_at_80_columns_every_line_fits(tmp_path):
    code, shown = on_a_terminal(tmp_path, "check", "--all", "--backend", "sim", "--rows", "10")
    assert code in (0, 1), "\n".join(shown[-30:])
    assert_fits(shown)
    assert any(s.startswith("dps310-operating-range") and " pass " in s for s in shown)
    assert any(s.startswith("checks 53/53 (100 %)") for s in shown)


def test_chamber_run_at_80_columns_every_line_fits_and_its_elapsed_is_its_summarys(tmp_path):
    protocol = tmp_path / "a-protocol-with-a-rather-long-name-for-its-opening-line.txt"
    protocol.write_text("SET,load_in,0.3\nWAIT,1500\n" + "MSR,20,0\nWAIT,1200\n" * 3)
    code, shown = on_a_terminal(tmp_path, "chamber", "run", str(protocol), "--backend", "sim", "-o",
                                str(tmp_path / "out-with-a-long-name-as-well.csv"), "--chunk", "5")
    assert code == 0, "\n".join(shown)
    assert_fits(shown)
    label = protocol.stem + ": rows"
    progress = [s for s in shown if s.startswith(label[:30])]
    done = re.search(r"rows in (\d+:\d\d) \(", "\n".join(shown))
    assert progress and done, shown
    assert f" elapsed {done.group(1)} " in progress[-1] + " ", (progress[-1], done.group(0))


def test_matrix_at_80_columns_every_line_fits(tmp_path):
    shared_path("datasheets", "DPS310.pdf")
    code, shown = on_a_terminal(tmp_path, "matrix", "--models", "scripted:reader,scripted:closed-book",
                                "--claims", "dps310-operating-range,si115x-adc-bit-depth", "--out",
                                str(tmp_path / "m"), "--no-chamber")
    assert code == 0, "\n".join(shown[-30:])
    assert_fits(shown)
    assert any(s.startswith("cells: planned 4") for s in shown)
