"""What doctor's probes send: tiny tools, the instructions, the random values a model must give back, and the
images and the PDF a probe shows it.

Why apart: the probes (agent.doctor_probes) and the tests that check them both need the same payloads, and a test
must be able to know, from the seed it passed, the code and the number the model is asked for.
"""

from __future__ import annotations

import json
import random
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.models.base import ModelTurn
from agent.tool import Tool

SMALL = 128  # max_tokens of a probe whose answer is one short call or a word
SYSTEM = "You are a connectivity probe. Follow the user's instruction exactly and briefly."


def _tool(name: str, description: str, **props: Any) -> Tool:
    return Tool(name, description, {"type": "object", "properties": props, "required": list(props),
                                    "additionalProperties": False})


ADD = _tool("add_numbers", "Add two integers and return their sum.", a={"type": "integer"}, b={"type": "integer"})
UNIT = _tool("lookup_unit", "Return the SI unit of a physical quantity.", quantity={"type": "string"})
PAGE = _tool("inspect_page", "Render a page of the document as an image.", page={"type": "integer", "minimum": 1})
NOTE = _tool("read_note", "Read the note left for the user and return its text.")
ASK_ADD = "Use the add_numbers tool to add 2 and 3. Call the tool; do not answer in text."
ASK_TWO = ("Use the add_numbers tool to add 2 and 3. Then use the add_numbers tool again to add 10 to that result. "
           "Call the tool each time; do not answer in text.")
ASK_NOTE = "Call read_note, then reply with the access code the note contains, and nothing else."
ASK_NUMBER = "Inspect page 1. Which number is written on it? Answer with the number only."
PDF_WORD = "ORCHID"
FILLER = ("This sentence is filler that pads the tool result so the prompt grows with it. ") * 18  # ~1,500 chars
TEXT_LIKE_TOKENS_PER_CHAR = 0.2
"""Prompt tokens per base64 character above which an image was read as text (base64 tokenises at ~0.6-0.8
tokens a character; a vision encoder's cost does not grow with the file's bytes, a few hundred at most)."""


@dataclass(frozen=True)
class ProbeSecrets:
    """The random values the model must give back: a code in a tool result, a number drawn in an image. Drawn
    from the generator the caller passes (seeded in tests), so a server cannot answer them from the prompt."""

    code: str
    number: str

    @classmethod
    def draw(cls, rng: random.Random) -> ProbeSecrets:
        letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2))
        return cls(code=f"{letters}-{rng.randint(1000, 9999)}", number=str(rng.randint(10000, 99999)))


def tiny_png(size: int = 64, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A solid-colour PNG (no imaging library needed); 64 px: some vision encoders refuse smaller images."""
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def number_png(number: str) -> bytes:
    """`number` printed large, black on white (220 x 90 pt at 96 dpi): what a vision model reads at a glance."""
    import pymupdf

    with pymupdf.open() as doc:
        page = doc.new_page(width=220, height=90)
        page.insert_text((16, 62), number, fontsize=46)
        return page.get_pixmap(dpi=96).tobytes("png")


def page_png(dpi: int = 100) -> bytes:
    """A full A4 page of small datasheet-like text at the run's rendering resolution (inspect_page's default
    100 dpi): the size of one page image a run sends."""
    import pymupdf

    words = ("Supply voltage VDD 1.7 3.6 V Operating range Min Typ Max temperature -40 85 °C pressure 300 1200 hPa "
             "current consumption µA standby mode conversion time ms resolution Pa noise RMS").split()
    with pymupdf.open() as doc:
        page = doc.new_page()
        for row, y in enumerate(range(60, 800, 13)):
            page.insert_text((50, y), " ".join(words[(row * 7 + k) % len(words)] for k in range(16)), fontsize=9)
        return page.get_pixmap(dpi=dpi).tobytes("png")


def tiny_pdf(word: str = PDF_WORD) -> bytes:
    """A one-page PDF printing `word`, with a correct cross-reference table."""
    content = f"BT /F1 24 Tf 20 40 Td ({word}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref, n = len(out), len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % n + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (n, xref)


def run_tool_surface() -> list[Tool]:
    """The phase-one tools exactly as a run offers them (the datasheet tools, then submit_extraction)."""
    from agent.datasheet.tools import DatasheetSession, datasheet_tools
    from agent.prompt import submit_extraction_tool

    return [*datasheet_tools(DatasheetSession(Path("doctor-no-document.pdf"))), submit_extraction_tool()]


def _alnum(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def gave_back(turn: ModelTurn, secret: str) -> bool:
    """Did the reply repeat `secret` (in its text or a call's arguments; case, spaces and dashes aside)?"""
    said = turn.message.text + " ".join(json.dumps(c.arguments) for c in turn.message.tool_calls)
    return _alnum(secret) in _alnum(said)
