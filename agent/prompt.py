"""What the model is told and offered about a claim: the allowlist projection, the prompts, the submit tool.

Why an allowlist: the agent must find the value in the document, so the prompt builder never receives the
claim's value, bounds, tolerance, needles, verbatim span or source page — only `ClaimView`. A test checks every
prompt and tool description for every claim against those strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.tool import Tool

SUBMIT_EXTRACTION = "submit_extraction"
SUBMIT_CHAMBER_OUTCOME = "submit_chamber_outcome"


@dataclass(frozen=True)
class ClaimView:
    """The only claim facts a prompt may contain."""

    claim_id: str
    component: str
    parameter: str
    unit: str
    condition_names: tuple[str, ...]


def project_claim(claim: Any) -> ClaimView:
    """The allowlist projection of a claim (protocols' Claim, or anything with the same attribute names)."""
    return ClaimView(
        claim_id=str(claim.id),
        component=str(claim.component),
        parameter=str(claim.parameter),
        unit=str(claim.unit),
        condition_names=tuple(str(c.name) for c in (getattr(claim, "conditions", None) or [])),
    )


def system_prompt() -> str:
    return (
        "You extract one specification from a component datasheet, reading the document with the tools you are "
        "given. Navigate with build_datasheet (the table of contents) and get_section_text or inspect_page, then "
        "verify the exact figure with search_text or extract_table_markdown before you answer. Quote the text the "
        "value comes from verbatim, and give the page it is on. Do not answer from memory: a value you did not "
        "read in the document is worse than no value.\n"
        f"Deliver your answer only by calling {SUBMIT_EXTRACTION}; text written in a reply is not read. "
        "Submitting freezes your extraction. You may then be offered chamber tools that measure the component "
        f"in a physical test chamber; when you are done with them, call {SUBMIT_CHAMBER_OUTCOME}."
    )


def first_user_message(view: ClaimView) -> str:
    conditions = ", ".join(view.condition_names) if view.condition_names else "none stated"
    return (
        "Extract this specification from the datasheet that is open in your tools.\n"
        f"- claim id: {view.claim_id}\n"
        f"- component: {view.component}\n"
        f"- parameter: {view.parameter}\n"
        f"- unit: {view.unit}\n"
        f"- stated conditions: {conditions}\n"
        "Report a single figure as `value`, or a range as `low` and `high`; a symmetric tolerance written as "
        "plus-or-minus X is the range from minus X to plus X. Use the unit asked for, converting if the "
        "document uses another, and record the conditions the document states for the figure."
    )


class ExtractionPayload(BaseModel):
    """What submit_extraction accepts; frozen (hashed) by the chamber service once accepted."""

    model_config = ConfigDict(extra="forbid")

    value: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = Field(min_length=1)
    page: int = Field(ge=1)
    quote: str = Field(min_length=1)
    conditions: dict[str, str] = {}
    notes: str = ""

    @model_validator(mode="after")
    def _a_value_or_a_range(self) -> ExtractionPayload:
        if self.value is None and self.low is None and self.high is None:
            raise ValueError("give `value`, or `low` and/or `high`")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        return self


def submit_extraction_tool() -> Tool:
    return Tool(
        name=SUBMIT_EXTRACTION,
        description=(
            "Submit your extraction. Call once, after you have read the figure in the document. Give `value` for "
            "a single figure, or `low`/`high` for a range or a plus-or-minus tolerance; `unit`; the `page` the "
            "figure is printed on; `quote`, the text it comes from, copied verbatim; and `conditions`, the test "
            "conditions the document states for it (name to text). Submitting freezes the extraction."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "value": {"type": ["number", "null"], "description": "a single figure, in `unit`"},
                "low": {"type": ["number", "null"], "description": "lower end of a range, in `unit`"},
                "high": {"type": ["number", "null"], "description": "upper end of a range, in `unit`"},
                "unit": {"type": "string"},
                "page": {"type": "integer", "description": "page number as the tools report it"},
                "quote": {"type": "string", "description": "verbatim text from the document"},
                "conditions": {"type": "object", "additionalProperties": {"type": "string"}},
                "notes": {"type": "string"},
            },
            "required": ["unit", "page", "quote"],
            "additionalProperties": False,
        },
    )


def default_chamber_outcome_tool() -> Tool:
    """Used only if the chamber service does not list submit_chamber_outcome itself."""
    return Tool(
        name=SUBMIT_CHAMBER_OUTCOME,
        description="End the chamber phase and report what you measured and concluded.",
        input_schema={"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
    )
