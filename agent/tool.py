"""The agent's one tool type and its one result envelope, whoever runs the tool.

Why one type: the datasheet tools run in process, submit_extraction is answered by the loop itself and the chamber
tools are listed and run by the chamber service over HTTP; the model sees them all the same way (a name, a
description written for it, a JSON schema), and each model client turns a `Tool` into its own wire shape. What
differs is only who answers a call: a `handler` in process, or nobody here (`handler is None`: the loop or the
chamber service answers it by name).

Why a typed result: a refused call's `error_type` (the datasheet tool's exception class, the chamber API's error
code) is set by whoever refused it, as a field, so the loop and the record never parse it back out of the text the
model reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]
"""A parsed JSON object: a tool's arguments or its input schema."""


@dataclass(frozen=True)
class ToolResult:
    """What one tool call gave back: the text the model reads (and the record keeps), whether it is an error and
    which (`error_type`), and images shown beside the text as (mime type, base64 data) pairs."""

    text: str
    is_error: bool = False
    error_type: str | None = None
    images: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.error_type is not None and not self.is_error:
            raise ValueError(f"a tool result with error_type {self.error_type!r} must have is_error=True")

    @classmethod
    def error(cls, error_type: str, message: str) -> ToolResult:
        """A refusal the model reads as '<error_type>: <message>', with `error_type` kept as a field."""
        return cls(f"{error_type}: {message}", True, error_type)

    @classmethod
    def from_exception(cls, exc: BaseException) -> ToolResult:
        """A tool's exception as a refusal named by its class (InvalidArgument, PageOutOfRange, ...)."""
        return cls.error(type(exc).__name__, str(exc))


ToolHandler = Callable[[JsonObject], ToolResult]


class NotRunHere(RuntimeError):
    """A tool without a handler was called in process; the loop or the chamber service answers it by name."""


@dataclass(frozen=True)
class Tool:
    """A tool as offered to a model, and how it runs: `handler` in process, or None when the loop (submit tools)
    or the chamber service (the tools GET /tools lists) answers it by name."""

    name: str
    description: str
    input_schema: JsonObject
    handler: ToolHandler | None = None

    @property
    def runs_here(self) -> bool:
        return self.handler is not None

    def __call__(self, arguments: JsonObject | None = None) -> ToolResult:
        if self.handler is None:
            raise NotRunHere(f"tool {self.name!r} has no handler in process: the loop or the chamber service "
                             "answers it by name")
        return self.handler(arguments or {})

    def definition(self) -> JsonObject:
        """{name, description, input_schema}: what a model is offered, and what the tool surface hash covers."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}
