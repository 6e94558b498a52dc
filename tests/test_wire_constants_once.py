"""The wire constants are named once, on the floor that owns them (issue 20): the oversampling rates and the
counter wrap in firmware_bridge/variables.py, the baud in firmware_bridge/session.py, the 0.1 s resend in
firmware_bridge/link.py, the 64-byte input buffer in firmware_bridge/packets.py. Every other module imports them;
this test reads the project's source for a written-out copy, so a new one is caught where it is written."""

from __future__ import annotations

import re
from pathlib import Path

from calibration.cross_sensor import ALLOWED_OSR
from calibration.records import CrossSensorParameters
from firmware_bridge.link import RESEND_AFTER_S
from firmware_bridge.packets import BOARD_INPUT_BUFFER, HOST_PACKET_LIMIT
from firmware_bridge.session import BOARD_PACE
from firmware_bridge.variables import OSR, OSR_LEVELS, layout_for
from protocols.barometer_protocols import PRECISION_OSRS

ROOT = Path(__file__).resolve().parent.parent

COPIES = {
    "the oversampling rates": (re.compile(r"(?i)^.*osr.*\b1(\.0)?,\s*2(\.0)?,\s*4(\.0)?,\s*8(\.0)?\b.*$", re.MULTILINE),
                               "firmware_bridge/variables.py"),
    "the counter wrap": (re.compile(r"\b100_?00[01]\b"), "firmware_bridge/variables.py"),
    "the baud": (re.compile(r"\b500_?000\b"), "firmware_bridge/session.py"),
    "the 0.1 s resend": (re.compile(r"resend\w*\s*=\s*0?\.1\b"), "firmware_bridge/link.py"),
    "the 64-byte buffer": (re.compile(r"^\s*[A-Z_]*(BUFFER|PACKET)[A-Z_]*\s*(:[^=]*)?=\s*64\b", re.MULTILINE),
                           "firmware_bridge/packets.py"),
}

AWAITING: set[tuple[str, str]] = set()
"""Copies in a module another session is rewriting (bench_cli.py's `--osr` choices): to become
`choices=list(OSR_LEVELS)`; remove the entry with that change (the test then insists on it)."""


def _sources() -> list[Path]:
    skip = {".venv", "tests", "benchmarks", "runs", "__pycache__"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]


def test_no_module_writes_out_a_wire_constant_it_does_not_own():
    found = set()
    where = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        for name, (pattern, home) in COPIES.items():
            if rel == home:
                continue
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.add((rel, name))
                if (rel, name) not in AWAITING:
                    where.append(f"{rel}:{line}: {name} written out ({m.group(0).strip()!r}); import it from {home}")
    assert not where, "\n".join(where)
    assert AWAITING <= found, f"no longer a copy, remove from AWAITING: {sorted(AWAITING - found)}"


def test_the_importers_hold_the_owners_values():
    assert OSR == (1.0, 2.0, 4.0, 8.0) and OSR_LEVELS == (1, 2, 4, 8)
    assert layout_for("wt", "standard").get("osr_upwind").allowed == OSR
    assert ALLOWED_OSR is OSR_LEVELS and PRECISION_OSRS is OSR_LEVELS
    assert CrossSensorParameters.model_fields["osr"].annotation.__args__ == OSR_LEVELS
    assert BOARD_PACE["lt"].resend_s == RESEND_AFTER_S == 0.1
    assert HOST_PACKET_LIMIT == BOARD_INPUT_BUFFER == 64
