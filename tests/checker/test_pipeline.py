"""The pipeline analysis on literal histories: each anomaly fires, and stays quiet when allowed."""

from __future__ import annotations

import pytest

from logquake.checker.pipeline import check_pipeline
from logquake.history import Op


def _ops(*pairs):
    out = []
    for i, (f, inv, done) in enumerate(pairs):
        out.append(Op(index=2 * i, time=10 * i, process=i, type="invoke", f=f, value=inv))
        out.append(Op(index=2 * i + 1, time=10 * i + 5, process=i, type="ok", f=f, value=done))
    return out


def _input(k, *vs):
    return ("input", [["send", k, v] for v in vs], [["send", k, [n, v]] for n, v in enumerate(vs)])


def _read(out_key, *records):
    return ("poll", [["poll"]], [["poll", {str(out_key): [list(r) for r in records]}]])


def test_every_input_once_is_valid_in_every_profile():
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 1]), (1, [0, 2])))
    for g in ("exactly-once", "at-least-once", "at-most-once"):
        res = check_pipeline(ops, guarantee=g)
        assert res["valid"] is True and res["error_types"] == []
        assert res["processing_counts"] == {"1": 2}


def test_a_reread_of_the_same_output_offset_is_not_double_processing():
    ops = _ops(_input(0, 1), _read(100, (0, [0, 1])), _read(100, (0, [0, 1])))
    assert check_pipeline(ops)["valid"] is True


def test_lost_processing_is_bad_except_at_most_once():
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 1])))
    res = check_pipeline(ops, guarantee="exactly-once")
    assert res["valid"] is False and res["bad_error_types"] == ["lost-processing"]
    assert res["anomalies"]["lost-processing"]["errs"][0]["value"] == 2
    assert res["processing_counts"] == {"0": 1, "1": 1}
    assert check_pipeline(ops, guarantee="at-least-once")["valid"] is False
    amo = check_pipeline(ops, guarantee="at-most-once")
    assert amo["valid"] is True and amo["error_types"] == ["lost-processing"]


def test_double_processing_is_bad_except_at_least_once():
    ops = _ops(_input(0, 1), _read(100, (0, [0, 1]), (1, [0, 1])), _read(101, (0, [0, 1])))
    res = check_pipeline(ops, guarantee="exactly-once")
    assert res["bad_error_types"] == ["double-processing"]
    assert res["anomalies"]["double-processing"]["errs"][0]["times"] == 3
    assert res["processing_counts"] == {"3": 1}
    assert check_pipeline(ops, guarantee="at-most-once")["valid"] is False
    assert check_pipeline(ops, guarantee="at-least-once")["valid"] is True


@pytest.mark.parametrize("kind", ["fail", "info"])
def test_unacknowledged_inputs_are_not_owed_processing(kind):
    ops = _ops(_input(0, 1), _read(100, (0, [0, 1])))
    ops += [Op(index=90, time=900, process=9, type="invoke", f="input", value=[["send", 0, 2]]),
            Op(index=91, time=905, process=9, type=kind, f="input", value=[["send", 0, 2]])]
    assert check_pipeline(ops)["valid"] is True


def test_nothing_to_check_is_unknown():
    assert check_pipeline(_ops(_read(100)))["valid"] == "unknown"


def test_output_out_of_input_order_is_bad_only_for_exactly_once():
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 2]), (1, [0, 1])))
    res = check_pipeline(ops, guarantee="exactly-once")
    assert res["bad_error_types"] == ["output-reorder"], res
    assert res["anomalies"]["output-reorder"]["errs"][0]["value"] == [0, 1]
    for g in ("at-least-once", "at-most-once"):  # a zombie worker may write late: reported only
        res = check_pipeline(ops, guarantee=g)
        assert res["valid"] is True and res["error_types"] == ["output-reorder"]


def test_a_replay_of_earlier_values_is_not_a_reorder():
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 1]), (1, [0, 2]), (2, [0, 1]), (3, [0, 2])))
    res = check_pipeline(ops, guarantee="at-least-once")
    assert res["valid"] is True and res["error_types"] == ["double-processing"]
