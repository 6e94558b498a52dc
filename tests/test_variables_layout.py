"""The catalogue's row order must equal the public datasets' column layout (minus timestamp and config)."""

import csv

import pytest

from conftest import shared_path
from firmware_bridge.variables import layout_for


@pytest.mark.parametrize(
    "chamber,config,filename",
    [("wt", "standard", "variables_wt_standard.csv"), ("wt", "pressure-control", "variables_wt_pressure_control.csv"),
     ("lt", "standard", "variables_lt_standard.csv")],
)
def test_row_order_matches_public_dataset_layout(chamber, config, filename):
    path = shared_path("chamber-data", "reference", filename)
    with path.open(newline="") as f:
        columns = [row["column_name"] for row in csv.DictReader(f)]
    assert columns[:2] == ["timestamp", "config"]
    assert list(layout_for(chamber, config).names) == columns[2:]


def test_row_lengths_match_the_protocol_document():
    # mk1-wire-protocol.md: wind tunnel standard 35 floats (140 bytes), light tunnel standard 44 floats (176 bytes)
    assert layout_for("wt").row_length == 35
    assert layout_for("lt").row_length == 44
