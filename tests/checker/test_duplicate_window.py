"""Duplicates against a dedup window, and resends of a restarted producer, on literal histories.

Each history is written out op by op with its times (s since the test began), as a JetStream
run records them: a `send` that ended info, the restarted producer's `resend` of it (same
key and value, `resend_of`), `attempts` where one op tried more than once, and reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.history import Op
from tests.checker.histories import Timed


def check(h: Timed, window: float | None, guarantee: str = "idempotent") -> dict[str, Any]:
    return check_history(h.ops, CheckOptions(guarantee=guarantee, duplicate_window=window))


def _resent_twice_stored(resend_at: float) -> Timed:
    """Value 7 of key 1 sent at 1 s (info: no PubAck), resent by the restarted producer at
    `resend_at` (ok, a second copy), and read at both offsets."""
    h = Timed()
    h.send(0.5, 0.6, 0, 1, 6, offset=1)
    orig = h.send(1.0, 11.0, 0, 1, 7, type_="info", error="TimeoutError")
    h.send(resend_at, resend_at + 0.1, 6, 1, 7, offset=3, f="resend", resend_of=orig.index)
    h.poll(resend_at + 1, 2, {1: [(1, 6), (2, 7), (3, 7)]})
    return h


def test_a_resend_within_the_window_that_stores_a_second_copy_is_a_bad_duplicate():
    r = check(_resent_twice_stored(resend_at=20.0), window=120.0)
    assert r["valid"] is False and r["bad_error_types"] == ["duplicate"]
    (e,) = r["anomalies"]["duplicate"]["errs"]
    assert (e["key"], e["value"], e["offsets"], e["attempts"], e["copies_allowed"]) == (1, 7, [2, 3], [1.0, 20.0], 1)
    assert "duplicate-after-window" not in r["anomalies"]


def test_a_resend_after_the_window_is_reported_apart_and_never_bad():
    r = check(_resent_twice_stored(resend_at=20.0), window=5.0)
    assert r["valid"] is True, r["bad_error_types"]
    assert "duplicate" not in r["anomalies"]
    (e,) = r["anomalies"]["duplicate-after-window"]["errs"]
    assert (e["key"], e["value"], e["offsets"], e["attempts"], e["copies_allowed"]) == (1, 7, [2, 3], [1.0, 20.0], 2)
    assert "more than the dedup window of 5 s" in e["explanation"]
    # Under any guarantee: the window is outside every promise.
    for g in ("at-most-once", "at-least-once", "exactly-once"):
        assert "duplicate-after-window" not in check(_resent_twice_stored(20.0), 5.0, g)["bad_error_types"]


def test_the_split_goes_by_when_attempts_were_sent_not_when_they_completed():
    # The resend was sent 4.9 s after the original (inside a 5 s window) and answered 60 s
    # later: the server had to drop it.
    h = Timed()
    orig = h.send(1.0, 11.0, 0, 1, 7, type_="info")
    h.send(5.9, 65.9, 6, 1, 7, offset=2, f="resend", resend_of=orig.index)
    h.poll(70.0, 2, {1: [(1, 7), (2, 7)]})
    assert check(h, window=5.0)["bad_error_types"] == ["duplicate"]


def test_retries_inside_one_op_are_placed_by_its_attempts():
    def history(attempts: list[int]) -> Timed:
        h = Timed()
        h.send(1.0, 9.0, 0, 1, 7, offset=2, attempts=attempts)
        h.poll(10.0, 2, {1: [(1, 7), (2, 7)]})
        return h

    # Tried at 1 s and again at 5.2 s: 4.2 s apart, outside a 2 s window, inside a 10 s one.
    late = history([0, 4_200_000_000])
    assert check(late, window=2.0)["bad_error_types"] == []
    assert check(late, window=2.0)["anomalies"]["duplicate-after-window"]["errs"][0]["attempts"] == [1.0, 5.2]
    assert check(late, window=10.0)["bad_error_types"] == ["duplicate"]
    # One attempt stores one copy, whatever the window.
    assert check(history([0]), window=0.5)["bad_error_types"] == ["duplicate"]


def test_more_copies_than_attempts_spread_beyond_the_window_is_a_bad_duplicate():
    h = Timed()
    orig = h.send(0.0, 10.0, 0, 1, 7, type_="info", attempts=[0, 1_000_000_000])  # 0 s and 1 s
    h.send(100.0, 100.1, 6, 1, 7, offset=3, f="resend", resend_of=orig.index)  # 100 s
    h.poll(101.0, 2, {1: [(1, 7), (2, 7), (3, 7)]})
    r = check(h, window=60.0)
    assert r["bad_error_types"] == ["duplicate"]
    (e,) = r["anomalies"]["duplicate"]["errs"]
    assert (e["count"], e["attempts"], e["copies_allowed"]) == (3, [0.0, 1.0, 100.0], 2)
    # Two copies are what those attempts may store.
    h.ops[-1] = Op(**{**h.ops[-1].to_dict(), "value": [["poll", {"1": [[1, 7], [3, 7]]}]]})
    assert check(h, window=60.0)["bad_error_types"] == []


def test_a_failed_resend_stored_nothing_and_excuses_nothing():
    h = Timed()
    orig = h.send(1.0, 11.0, 0, 1, 7, type_="info")
    h.send(100.0, 100.1, 6, 1, 7, f="resend", type_="fail", resend_of=orig.index, error="no responders")
    h.poll(101.0, 2, {1: [(1, 7), (2, 7)]})
    r = check(h, window=60.0)
    assert r["bad_error_types"] == ["duplicate"] and r["anomalies"]["duplicate"]["errs"][0]["attempts"] == [1.0]


def test_without_a_window_duplicates_are_as_before():
    r = check(_resent_twice_stored(resend_at=20.0), window=None)
    assert r["bad_error_types"] == ["duplicate"]
    (e,) = r["anomalies"]["duplicate"]["errs"]
    assert {k: v for k, v in e.items() if k != "explanation"} == {"key": 1, "value": 7, "count": 2, "offsets": [2, 3]}
    assert check(_resent_twice_stored(20.0), None, "at-least-once")["valid"] is True


def test_a_resend_is_not_a_second_writer_of_its_value():
    # The value was stored by the original and read before the resend was even invoked;
    # the resend then failed. Neither a read from the future nor an aborted read: the
    # value's writer is the original send, whose outcome was unknown.
    h = Timed()
    orig = h.send(1.0, 11.0, 0, 1, 7, type_="info")
    h.poll(12.0, 2, {1: [(1, 7)]})
    h.send(20.0, 20.1, 6, 1, 7, f="resend", type_="fail", resend_of=orig.index, error="no responders")
    h.final_read(30.0, 3, {1: 2}, {1: [(1, 7)]})
    r = check(h, window=120.0)
    assert r["valid"] is True and r["error_types"] == [], r["anomalies"]


def test_a_value_only_a_resend_acknowledged_must_survive_to_the_final_read():
    def history(final: list[tuple[int, int]]) -> Timed:
        h = Timed()
        h.send(0.5, 0.6, 0, 1, 6, offset=1)
        orig = h.send(1.0, 11.0, 0, 1, 7, type_="info")
        h.send(20.0, 20.1, 6, 1, 7, offset=2, f="resend", resend_of=orig.index)
        h.final_read(30.0, 3, {1: 3}, {1: final})
        return h

    r = check(history([(1, 6)]), window=120.0)
    assert r["bad_error_types"] == ["lost"] and r["anomalies"]["lost"]["errs"][0]["value"] == 7
    assert check(history([(1, 6), (2, 7)]), window=120.0)["valid"] is True


def test_the_window_must_be_positive():
    with pytest.raises(ValueError, match="duplicate_window"):
        CheckOptions(duplicate_window=0)
