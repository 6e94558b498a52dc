"""Datasheet reading tools (issue #6): manifest, section text, search, tables as markdown, page images, on PyMuPDF.

Library code here never imports pymupdf4llm or pymupdf-layout: importing the latter switches PyMuPDF's table
finder to another engine for the whole process.
"""

from .document import DatasheetToolError
from .manifest import Manifest, ManifestCache, build_datasheet, load_datasheet
from .tools import DatasheetSession, ToolDefinition, datasheet_tools

__all__ = [
    "DatasheetSession",
    "DatasheetToolError",
    "Manifest",
    "ManifestCache",
    "ToolDefinition",
    "build_datasheet",
    "datasheet_tools",
    "load_datasheet",
]
