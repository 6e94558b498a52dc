"""Probe arms as tool-surface transformations handed to `run_cell(tools=...)`.

Why transformations and not special loops: every arm then runs through the same recorded loop, and the record
shows exactly what was offered (the tool surface and its hash) and what came back. The arm's name is written into
the tool-surface version ("<version>+arm=<arm>"), so a record alone says which arm produced it.

  normal               the five datasheet tools on the intended PDF
  withhold-navigation  no datasheet tool at all (the paper's planted fault F1: tool-bypass)
  withhold-crosscheck  search_text and extract_table_markdown removed (F5: verification-skipped)
  closed-book          no document tools (any fidelity pass is a corrupt success by construction)
  null-tool            every tool present, every call returns empty content
  wrong-content        every tool present, every call served from a decoy datasheet
  single-pass          no tools; the whole document's text layer goes into the request (see DocumentInRequest)
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.loop import datasheet_local_tools
from agent.models.base import DocumentBlock, ImageBlock, Message, ModelClient, ModelRequest, ModelTurn, TextBlock
from agent.scoring.cells import ARM_MARK, CROSS_CHECK_TOOLS, NAVIGATION_TOOLS
from agent.tool import Tool, ToolResult

if TYPE_CHECKING:
    from agent.datasheet import DatasheetSession

ARMS = ("normal", "withhold-navigation", "withhold-crosscheck", "closed-book", "null-tool", "wrong-content",
        "single-pass")


class ArmError(ValueError):
    """An unknown arm, or an arm missing what it needs (a decoy PDF for wrong-content)."""


@dataclass
class ArmSetup:
    """What run_cell needs for one arm: the phase-one tools, the surface version and (single-pass) a model wrapper."""

    arm: str
    tools: list[Tool]
    surface_version: str
    wrap_model: Any = None  # callable(model) -> model, or None

    def model(self, model: ModelClient) -> ModelClient:
        return self.wrap_model(model) if self.wrap_model is not None else model


def null_tool(tool: Tool) -> Tool:
    """The same tool as offered, answering every call with empty content (no error)."""
    return dataclasses.replace(tool, handler=lambda arguments: ToolResult(""))


def arm_setup(arm: str, pdf: Path, *, decoy_pdf: Path | None = None, cache: Any = None) -> ArmSetup:
    """Tools and surface version for `arm` on the intended datasheet `pdf`; `cache` (a ManifestCache) shares
    one reading of each document between cells."""
    if arm not in ARMS:
        raise ArmError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
    if arm == "wrong-content":
        if decoy_pdf is None or Path(decoy_pdf).resolve() == Path(pdf).resolve():
            raise ArmError("the wrong-content arm needs a decoy datasheet different from the intended one")
        tools, version = datasheet_local_tools(Path(decoy_pdf), cache)
        return ArmSetup(arm, tools, f"{version}{ARM_MARK}{arm}")
    if arm in ("withhold-navigation", "closed-book"):
        return ArmSetup(arm, [], f"none{ARM_MARK}{arm}")
    if arm == "single-pass":
        return ArmSetup(arm, [], f"none{ARM_MARK}{arm}", lambda model: DocumentInRequest(model, Path(pdf)))
    tools, version = datasheet_local_tools(Path(pdf), cache)
    if arm == "withhold-crosscheck":
        tools = [t for t in tools if t.name not in CROSS_CHECK_TOOLS]
    elif arm == "null-tool":
        tools = [null_tool(t) if t.name in NAVIGATION_TOOLS else t for t in tools]
    return ArmSetup(arm, tools, f"{version}{ARM_MARK}{arm}")


def document_text(s: DatasheetSession) -> str:
    """The whole text layer with page markers, from the datasheet tools' own section reader."""
    pages = s.manifest.pages
    return "\n".join(s.section_text(a, min(a + 29, pages)) for a in range(1, pages + 1, 30))


class DocumentInRequest(ModelClient):
    """A model client that puts the whole document into the first user message of every request (single-pass
    baseline): the PDF itself for a backend that reads PDFs (`accepts_pdf`), else every page rendered as an image
    (`page_dpi`), in both cases with the text layer beside it so a text-only reading is possible too."""

    def __init__(self, model: ModelClient, pdf: Path, *, page_dpi: int = 80) -> None:
        self.inner = model
        self.pdf = Path(pdf)
        self.page_dpi = page_dpi
        self.model = getattr(model, "model", "unknown")
        self.provider = getattr(model, "provider", "unknown")
        self.transport = getattr(model, "transport", "unknown")
        self._blocks: list[Any] | None = None

    def document_blocks(self) -> list[Any]:
        """Built once per cell: the document as the inner client can take it."""
        if self._blocks is None:
            from agent.datasheet import DatasheetSession

            with DatasheetSession(self.pdf) as s:  # one reading of the PDF serves the text and the page images
                text = TextBlock("The datasheet (its whole text layer, page by page):\n\n" + document_text(s))
                if getattr(self.inner, "accepts_pdf", False):
                    data = base64.b64encode(self.pdf.read_bytes()).decode("ascii")
                    self._blocks = [DocumentBlock("application/pdf", data, self.pdf.name), text]
                else:
                    self._blocks = [*page_images(s, dpi=self.page_dpi), text]
        return self._blocks

    def complete(self, request: ModelRequest) -> ModelTurn:
        messages = list(request.messages)
        if messages and messages[0].role == "user":
            first = messages[0]
            messages[0] = Message(first.role, [*self.document_blocks(), *first.blocks])
        return self.inner.complete(dataclasses.replace(request, messages=messages))


def page_images(s: DatasheetSession, *, dpi: int = 80) -> list[ImageBlock]:
    """Every page rendered to PNG by the datasheet tools' own renderer (inspect_page), as image blocks."""
    return [ImageBlock("image/png", base64.b64encode(s.page_png(n, dpi=dpi)).decode("ascii"))
            for n in range(1, s.manifest.pages + 1)]
