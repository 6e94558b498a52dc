"""firmware_bridge.error_text.exception_line: every error a person reads is one line, and says what the field was."""

from __future__ import annotations

import pydantic
import pytest
import yaml

from firmware_bridge.error_text import exception_line


class _Two(pydantic.BaseModel):
    rows: int
    port: str


def test_a_pydantic_report_becomes_its_first_field_and_how_many_more():
    with pytest.raises(pydantic.ValidationError) as caught:
        _Two.model_validate({"rows": "many"})
    text = exception_line(caught.value)
    assert "\n" not in text
    assert text.startswith("_Two: field 'rows': ") and text.endswith("(and 1 more)")


def test_a_yaml_caret_drawing_folds_into_one_line():
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load("a: [1, 2\nb: 3\n")
    assert "\n" in str(caught.value)  # what would break a terminal line or a database column
    text = exception_line(caught.value)
    assert "\n" not in text and "  " not in text and "line" in text
