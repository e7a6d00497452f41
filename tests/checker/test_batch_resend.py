"""Resent atomic batches (JetStream transactions under exactly-once) on literal histories.

A transaction that ended info (its commit unanswered) is resent whole by the restarted
producer: a `resend` op with the batch's sends and `resend_of`. It ends ok with offsets when
stored now, ok with `duplicate` and offsets unknown when the leader rejected it for Msg-Ids
the stream holds (the original was stored whole), fail when it certainly stored nothing.
Each case below fires or stays quiet, under the guarantee that runs it.
"""

from __future__ import annotations

from typing import Any

from logquake.checker import CheckOptions, check_history
from logquake.history import Op
from tests.checker.histories import Timed

WINDOW = 120.0  # the server's default duplicate window


def check(h: Timed, guarantee: str = "exactly-once") -> dict[str, Any]:
    return check_history(h.ops, CheckOptions(guarantee=guarantee, duplicate_window=WINDOW, txn=True))


def _unsure_batch() -> tuple[Timed, Op]:
    """Key 1: values 1, 2 committed at offsets 1, 2; then the batch of 3, 4 whose commit went
    unanswered (info)."""
    h = Timed()
    h.batch(0.5, 0.6, 0, 1, [1, 2], [1, 2])
    return h, h.batch(1.0, 3.0, 0, 1, [3, 4], type_="info", error="commit: TimeoutError")


def test_a_resent_batch_the_server_stored_a_second_time_is_a_duplicate_of_each_value():
    h, orig = _unsure_batch()
    h.batch(5.0, 5.1, 6, 1, [3, 4], [5, 6], f="resend", resend_of=orig.index)
    h.final_read(10.0, 3, {1: 7}, {1: [(1, 1), (2, 2), (3, 3), (4, 4), (5, 3), (6, 4)]})
    r = check(h)
    assert r["valid"] is False and r["bad_error_types"] == ["duplicate"], r["anomalies"]
    errs = sorted(r["anomalies"]["duplicate"]["errs"], key=lambda e: e["value"])
    assert [(e["value"], e["offsets"], e["attempts"], e["copies_allowed"]) for e in errs] == [
        (3, [3, 5], [1.0, 5.0], 1), (4, [4, 6], [1.0, 5.0], 1)]
    assert check(h, "at-least-once")["valid"] is True  # what at-least-once allows


def test_a_resent_batch_the_stream_already_held_is_acknowledged_once_and_quiet():
    h, orig = _unsure_batch()
    h.batch(5.0, 5.1, 6, 1, [3, 4], [None, None], f="resend", resend_of=orig.index, duplicate=True)
    h.final_read(10.0, 3, {1: 5}, {1: [(1, 1), (2, 2), (3, 3), (4, 4)]})
    r = check(h)
    assert r["valid"] is True and r["error_types"] == [], r["anomalies"]
    assert r["final_read"]["acknowledged"] == 4


def test_a_held_resend_acknowledges_its_values_so_the_final_read_must_hold_them():
    # The leader said the stream holds the batch's Msg-Ids: its values must be readable.
    h, orig = _unsure_batch()
    h.batch(5.0, 5.1, 6, 1, [3, 4], [None, None], f="resend", resend_of=orig.index, duplicate=True)
    h.final_read(10.0, 3, {1: 3}, {1: [(1, 1), (2, 2)]})
    r = check(h)
    assert r["bad_error_types"] == ["lost"], r["anomalies"]
    assert sorted(e["value"] for e in r["anomalies"]["lost"]["errs"]) == [3, 4]


def test_a_resend_that_stored_nothing_is_no_failed_writer_of_the_values_the_original_stored():
    # The original batch was stored (read at 3, 4); its resend then failed (no responders,
    # an id in process). Reading 3 and 4 is no aborted read: their writer is the original.
    h, orig = _unsure_batch()
    h.poll(4.0, 2, {1: [(3, 3), (4, 4)]})
    h.batch(5.0, 5.1, 6, 1, [3, 4], f="resend", type_="fail", resend_of=orig.index,
            error="message 2: rejected (10158): a message id of the batch is in a proposal not yet applied")
    h.final_read(10.0, 3, {1: 5}, {1: [(1, 1), (2, 2), (3, 3), (4, 4)]})
    r = check(h)
    assert r["valid"] is True and r["error_types"] == [], r["anomalies"]


def test_half_of_a_batch_visible_after_a_held_resend_is_reported():
    # The leader held the batch's Msg-Ids, so the batch was stored, whole as atomicity
    # promises: 3 read without 4 to the end is value 4 lost. (Without the resend neither
    # value has a known offset and the info original's torn state goes unreported.)
    h, orig = _unsure_batch()
    h.batch(5.0, 5.1, 6, 1, [3, 4], [None, None], f="resend", resend_of=orig.index, duplicate=True)
    h.batch(6.0, 6.1, 6, 1, [5], [5])
    h.final_read(10.0, 3, {1: 6}, {1: [(1, 1), (2, 2), (3, 3), (5, 5)]})
    r = check(h)
    assert r["valid"] is False and r["bad_error_types"] == ["lost"], r["anomalies"]
    assert [e["value"] for e in r["anomalies"]["lost"]["errs"]] == [4]


def test_half_of_a_committed_resend_visible_is_lost_in_the_final_read():
    # A resend stored now acknowledges its values at their offsets, as a committed batch;
    # the final read must hold both (the queue analysis takes a value's writer to be the
    # original, so the resend's acknowledgement counts in the final read).
    h, orig = _unsure_batch()
    h.batch(5.0, 5.1, 6, 1, [3, 4], [3, 4], f="resend", resend_of=orig.index)
    h.final_read(10.0, 3, {1: 5}, {1: [(1, 1), (2, 2), (3, 3)]})
    r = check(h)
    assert r["valid"] is False and r["bad_error_types"] == ["lost"], r["anomalies"]
    assert [(e["value"], e["offset"]) for e in r["anomalies"]["lost"]["errs"]] == [(4, 4)]
