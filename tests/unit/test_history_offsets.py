"""The reader's offset rule: -1 from a send is no offset, any other negative offset is a
malformed line, and offsets up to 2^63-1 are valid (read and checked without a crash)."""

from __future__ import annotations

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.errors import HistoryFormatError
from logquake.history import load_history

MAX = 2**63 - 1


def _file(tmp_path, lines: list[str]):
    path = tmp_path / "history.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _send(i: int, p: int, k: int, v, offset) -> list[str]:
    o = "null" if offset is None else str(offset)
    return [
        f'{{"index": {i}, "time": {i * 1000}, "process": {p}, "type": "invoke", "f": "send", "value": [["send", {k}, {v}]]}}',
        f'{{"index": {i + 1}, "time": {i * 1000 + 500}, "process": {p}, "type": "ok", "f": "send", '
        f'"value": [["send", {k}, [{o}, {v}]]]}}',
    ]


def _poll(i: int, p: int, reads: str) -> list[str]:
    return [
        f'{{"index": {i}, "time": {i * 1000}, "process": {p}, "type": "invoke", "f": "poll", "value": [["poll"]]}}',
        f'{{"index": {i + 1}, "time": {i * 1000 + 500}, "process": {p}, "type": "ok", "f": "poll", '
        f'"value": [["poll", {reads}]]}}',
    ]


def test_a_send_at_minus_one_has_no_offset(tmp_path):
    # Two sends Kafka acknowledged with no offset (-1), then read at their real places.
    lines = _send(0, 0, 1, 10, -1) + _send(2, 0, 1, 11, "-1") + _poll(4, 1, '{"1": [[0, 10], [1, 11]]}')
    ops = load_history(_file(tmp_path, lines))
    assert ops[1].value == [["send", 1, [None, 10]]]
    assert ops[3].value == [["send", 1, [None, 11]]]
    r = check_history(ops, CheckOptions())
    assert r["valid"] is True, r["anomalies"]
    assert r["error_types"] == []


def test_minus_one_with_spaces_is_no_offset_too(tmp_path):
    line = '{"index": 1, "time": 5, "process": 0, "type": "ok", "f": "send", "value": [["send", 1, [ -1 , 10]]]}'
    inv = '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send", "value": [["send", 1, 10]]}'
    assert load_history(_file(tmp_path, [inv, line]))[1].value == [["send", 1, [None, 10]]]


def test_minus_one_that_bypasses_the_reader_is_refused_by_the_index_not_judged():
    # The reader turns -1 into null; ops built in memory without it must not be read as
    # positions (false inconsistent-offsets, nonmonotonic-send): the index names the op.
    from tests.checker.histories import H

    h = H()
    h.send(0, 1, 10, -1)
    h.send(0, 1, 11, -1)
    h.poll(1, {1: [(0, 10), (1, 11)]})
    r = check_history(h.ops, CheckOptions())
    assert r["valid"] == "unknown" and r["bad_error_types"] == []
    assert "op 1 (process 0) sent to key 1: offset -1 is not an integer >= 0" in r["analysis_errors"]["index"]


def test_a_negative_poll_offset_is_a_malformed_line(tmp_path):
    lines = _send(0, 0, 1, 10, 0) + _poll(2, 1, '{"1": [[-3, 10]]}')
    path = _file(tmp_path, lines)
    with pytest.raises(HistoryFormatError) as e:
        load_history(path)
    assert e.value.line == 4
    assert f"{path}:4:" in str(e.value)
    assert "a poll of key 1 read offset -3" in str(e.value)


def test_a_send_offset_below_minus_one_is_a_malformed_line(tmp_path):
    path = _file(tmp_path, _send(0, 0, 7, 10, -2))
    with pytest.raises(HistoryFormatError) as e:
        load_history(path)
    assert e.value.line == 2
    assert "a send to key 7 at offset -2" in str(e.value)


def test_negative_values_and_other_dashes_are_not_offsets(tmp_path):
    lines = _send(0, 0, 1, -10, 0) + _poll(2, 1, '{"1": [[0, -10]]}')
    lines.append('{"index": 4, "time": 9, "process": "nemesis", "type": "info", "f": "start-partition", "value": [-1]}')
    ops = load_history(_file(tmp_path, lines))
    assert ops[3].value == [["poll", {"1": [[0, -10]]}]]
    assert ops[4].value == [-1]


def test_offsets_up_to_2_63_minus_1_are_valid(tmp_path):
    a, b, c = 10, 11, 12
    lines = (
        _send(0, 0, 1, a, MAX - 2)
        + _send(2, 0, 1, b, MAX - 1)
        + _poll(4, 1, f'{{"1": [[{MAX - 2}, {a}], [{MAX - 1}, {b}]]}}')
        + _send(6, 0, 1, c, MAX)
        + _poll(8, 1, f'{{"1": [[{MAX}, {c}]]}}')
    )
    ops = load_history(_file(tmp_path, lines))
    r = check_history(ops, CheckOptions())
    assert r["valid"] is True, r
    assert "analysis_errors" not in r and "informational_errors" not in r
    assert r["worst_realtime_lag"]["lag"] >= 0
