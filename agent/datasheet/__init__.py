"""Datasheet reading tools (issue #6): manifest, section text, search, tables as markdown, page images, on PyMuPDF.

Library code here never imports pymupdf4llm or pymupdf-layout: importing the latter switches PyMuPDF's table
finder to another engine for the whole process. PyMuPDF 2.0 imports both itself when `pymupdf` is imported (its
layout package loads an ONNX model at import, and onnxruntime writes a device id and a database into
~/.cache/Microsoft on every command, ~1 s of import time). Nothing here uses either, so `_keep_layout_engines_out`
marks them absent before the first `import pymupdf`: PyMuPDF's own `try: import ... except ImportError` then
leaves them out, exactly as on an install without them.

MuPDF prints its own complaints about a broken file ("MuPDF error: format error: cycle in page tree") on stdout,
where they would break `--json`'s one object and show internals beside our one-line error. `_mupdf_messages_to_log`
sends PyMuPDF's messages to the `pymupdf` logger at DEBUG instead (seen with -v); every fault that matters reaches
the caller as a typed error (document.py). A PYMUPDF_MESSAGE set by the user still wins.
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


def _mupdf_messages_to_log() -> None:
    import os

    import pymupdf

    if "PYMUPDF_MESSAGE" not in os.environ:
        pymupdf.set_messages(pylogging_logger=logging.getLogger("pymupdf"), pylogging_level=logging.DEBUG)


_mupdf_messages_to_log()

from .document import DatasheetToolError, DocumentUnreadable  # noqa: E402  (after the guard: these import pymupdf)
from .manifest import Manifest, ManifestCache, build_datasheet, load_datasheet  # noqa: E402
from .tools import DatasheetSession, datasheet_tools  # noqa: E402

__all__ = [
    "DatasheetSession",
    "DatasheetToolError",
    "DocumentUnreadable",
    "Manifest",
    "ManifestCache",
    "build_datasheet",
    "datasheet_tools",
    "load_datasheet",
]
