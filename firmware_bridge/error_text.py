"""An error as one line of text: what a refusal on the terminal, a lab's stored error and a log line print.

Why one place: an exception's text may span lines (pydantic's report lists every field on its own lines, YAML draws
a caret under the offending column), and a line that breaks in the middle of a terminal message, a JSON field or a
database column reads as two errors. Every layer that shows an error to a person folds it here, the same way.
"""

from __future__ import annotations

from pydantic import ValidationError


def exception_line(exc: BaseException) -> str:
    """`exc`'s message on one line: a pydantic report becomes its title, first field and message (and how many
    more), any other line breaks and runs of spaces fold into single spaces."""
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": str(exc)}
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{exc.title}: field '{'.'.join(str(p) for p in first['loc'])}': {first['msg']}{more}"
    return " ".join(str(exc).split())
