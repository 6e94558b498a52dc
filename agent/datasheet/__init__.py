"""Datasheet reading tools (issue #6): manifest, section text, search, tables as markdown, page images, on PyMuPDF.

Library code here never imports pymupdf4llm or pymupdf-layout: importing the latter switches PyMuPDF's table
finder to another engine for the whole process. PyMuPDF 2.0 imports both itself when `pymupdf` is imported (its
layout package loads an ONNX model at import, and onnxruntime writes a device id and a database into
~/.cache/Microsoft on every command, ~1 s of import time). Nothing here uses either, so `_keep_layout_engines_out`
marks them absent before the first `import pymupdf`: PyMuPDF's own `try: import ... except ImportError` then
leaves them out, exactly as on an install without them.
"""

import logging
import sys

log = logging.getLogger(__name__)

LAYOUT_ENGINES = ("pymupdf.layout", "pymupdf4llm")
"""The modules PyMuPDF 2.0 imports optionally at its own import; each pulls in onnxruntime."""


def _keep_layout_engines_out() -> None:
    if "pymupdf" in sys.modules:  # someone imported PyMuPDF first: too late, say so rather than pretend
        loaded = [m for m in LAYOUT_ENGINES if sys.modules.get(m) is not None]
        if loaded:
            log.debug("pymupdf was imported before agent.datasheet; %s already loaded", ", ".join(loaded))
        return
    for name in LAYOUT_ENGINES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None in sys.modules: ImportError on import


_keep_layout_engines_out()

from .document import DatasheetToolError  # noqa: E402  (after the guard above: these import pymupdf)
from .manifest import Manifest, ManifestCache, build_datasheet, load_datasheet  # noqa: E402
from .tools import DatasheetSession, datasheet_tools  # noqa: E402

__all__ = [
    "DatasheetSession",
    "DatasheetToolError",
    "Manifest",
    "ManifestCache",
    "build_datasheet",
    "datasheet_tools",
    "load_datasheet",
]
