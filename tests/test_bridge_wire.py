"""Layers 1–3 of the Mk1 protocol byte by byte: packets, segments, messages, rows (no port needed)."""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np
import pytest

from firmware_bridge.batch import build_segments, decode_uniform, encode_acks, frame_uniform
from firmware_bridge.errors import FirmwareError, FrameRejected, PacketTooLong
from firmware_bridge.messages import format_set, format_value, parse_set_reply, parse_variables
from firmware_bridge.packets import PacketSplitter, decode_body, encode_packet
from firmware_bridge.rows import RowChecker, encode_rows
from firmware_bridge.segments import (
    FIRST_SEQ,
    FLAG_ACK,
    SEQ_START,
    Arrival,
    Endpoint,
    decode_segment,
    encode_segment,
)
from firmware_bridge.variables import UNSET


def test_segment_layout_matches_the_protocol_table():
    seg = encode_segment(FLAG_ACK, 7, 9, b"OK")
    assert seg[0] == 1
    assert struct.unpack("<II", seg[1:9]) == (7, 9)
    assert seg[9:11] == b"OK"
    assert struct.unpack("<I", seg[11:]) == (zlib.crc32(seg[:11]),)


def test_packet_is_nul_base64_eot():
    seg = encode_segment(0, 1, 2, b"RST")
    assert encode_packet(seg) == b"\x00" + base64.b64encode(seg) + b"\x04"


def test_host_packet_over_64_bytes_is_refused_naming_the_limit():
    with pytest.raises(PacketTooLong, match="64-byte"):
        encode_packet(encode_segment(0, 1, 2, b"SET,pressure_downwind,-123456.789012"))


def test_a_corrupted_segment_is_dropped():
    seg = bytearray(encode_segment(0, 1, 2, b"SET,flag,1"))
    seg[10] ^= 0x01
    assert decode_segment(bytes(seg)) is None


def test_numbering_starts_at_2_32_minus_1_and_wraps_to_0():
    sender, receiver = Endpoint(), Endpoint()
    assert sender.last_delivered == SEQ_START
    seq1, seg1 = sender.data_segment(b"a")
    seq2, seg2 = sender.data_segment(b"b")
    assert (seq1, seq2) == (FIRST_SEQ, 0)
    assert receiver.classify(decode_segment(seg1)) is Arrival.DELIVER
    assert receiver.classify(decode_segment(seg1)) is Arrival.DUPLICATE
    assert receiver.classify(decode_segment(seg2)) is Arrival.DELIVER
    _, seg4 = sender.data_segment(b"skipped"), sender.data_segment(b"d")
    assert receiver.classify(decode_segment(seg4[1])) is Arrival.UNEXPECTED
    assert receiver.counters.duplicates == 1 and receiver.counters.unexpected == 1


def test_splitter_keeps_error_reports_outside_framing_across_chunks():
    stream = encode_packet(encode_segment(0, 5, 6, b"OK,DONE"), None) + b"<ERR,er04,bogus>"
    splitter = PacketSplitter()
    first = splitter.feed(stream[:-6])
    second = splitter.feed(stream[-6:])
    assert [decode_segment(decode_body(b)).data for b in first.bodies] == [b"OK,DONE"]
    assert first.error_reports == [] and second.error_reports == [b"<ERR,er04,bogus>"]
    err = FirmwareError.from_report(second.error_reports[0])
    assert (err.code, err.detail) == ("er04", "bogus")
    assert "unknown SET target" in err.meaning


def test_splitter_result_does_not_depend_on_chunking(rng):
    packets = [encode_packet(encode_segment(0, i, 0, bytes(rng.integers(0, 256, int(n), dtype=np.uint8))), None)
               for i, n in enumerate(rng.integers(0, 200, 30))]
    stream = b"noise".join(packets)
    whole = PacketSplitter().feed(stream).bodies
    splitter, pieces = PacketSplitter(), []
    cuts = sorted(rng.integers(0, len(stream), 40).tolist())
    for a, b in zip([0, *cuts], [*cuts, len(stream)]):
        pieces += splitter.feed(stream[a:b]).bodies
    assert pieces == whole and len(whole) == 30


def test_vectorised_framing_is_byte_identical_to_one_by_one(rng):
    payloads = rng.integers(0, 256, (17, 140), dtype=np.uint8)
    one_by_one = b"".join(
        encode_packet(encode_segment(0, (FIRST_SEQ + i) % 2**32, 3, payloads[i].tobytes()), None) for i in range(17)
    )
    assert frame_uniform(build_segments(0, FIRST_SEQ, 3, payloads)) == one_by_one
    acks = [FIRST_SEQ, 0, 1, 77]
    assert encode_acks(5, acks) == b"".join(encode_packet(encode_segment(FLAG_ACK, 5, a), None) for a in acks)
    bodies = PacketSplitter().feed(one_by_one).bodies
    assert decode_uniform(bodies).tobytes() == build_segments(0, FIRST_SEQ, 3, payloads).tobytes()


@pytest.mark.parametrize("value, text", [(0.5, "0.5"), (95000.0, "95000"), (-9999.0, "-9999"), (1e-7, "0.0000001")])
def test_set_values_are_plain_decimals(value, text):
    assert format_value(value) == text
    assert format_set("load_in", value) == f"SET,load_in,{text}"


def test_replies_and_announcements_parse():
    assert parse_set_reply("OK,SET,hatch=10.00", "hatch").value == 10.0
    assert parse_variables("VARIABLES_LIST,counter,flag,intervention,hatch") == ("counter", "flag", "intervention", "hatch")


def test_rows_decode_with_unset_as_nan_and_counters_checked_across_calls():
    checker = RowChecker(4)
    rows = np.array([[0, 0, 1, 5.5], [1, 0, 0, UNSET]], dtype=np.float32)
    block = checker.decode(encode_rows(rows), [1.0, 2.0])
    assert block.values[0, 3] == 5.5 and np.isnan(block.values[1, 3])
    with pytest.raises(FrameRejected) as info:
        checker.decode(encode_rows(np.array([[3, 0, 0, 1]], dtype=np.float32)), [3.0])
    assert "expected counter 2" in str(info.value) and "received counter 3" in str(info.value)


def test_counter_reaches_100000_then_wraps_to_0():
    """The firmware sends row 100000 before 0 (`observation_counter < max_counter ? +1 : 0`)."""
    checker = RowChecker(1, first_counter=99_999)
    block = checker.decode(encode_rows(np.array([[99_999], [100_000], [0]], dtype=np.float32)), [0.0] * 3)
    assert block.values[:, 0].tolist() == [99_999, 100_000, 0]
    with pytest.raises(FrameRejected, match="expected counter 100000"):
        RowChecker(1, first_counter=99_999).decode(encode_rows(np.array([[99_999], [0]], dtype=np.float32)), [0.0] * 2)


def test_wrong_row_length_names_expected_and_received():
    with pytest.raises(FrameRejected, match=r"expected 16 bytes \(4 float32\), received 12 bytes"):
        RowChecker(4).decode([b"\x00" * 16, b"\x00" * 12], [0.0, 0.0])
