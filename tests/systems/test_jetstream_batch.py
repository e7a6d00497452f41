"""batch.py, JetStream's atomic batch protocol without a server: headers, replies, verdicts."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from logquake.checker.options import CheckOptions
from logquake.checker.queue import check_history
from logquake.config import resolve_config
from logquake.guarantees import apply_guarantee
from logquake.history import FAIL, INFO, OK
from logquake.systems.jetstream import batch
from logquake.systems.jetstream.server import server_version
from logquake.workloads.generator import Context
from logquake.workloads.queue import make_generator
from tests.checker.histories import H, Timed
from tests.unit.test_system_config import _refused


def _ack(**fields) -> bytes:
    return json.dumps({"stream": "lq-1", **fields}).encode()


def _error(code: int, description: str = "no") -> bytes:
    return json.dumps({"stream": "lq-1", "error": {"code": 400, "err_code": code, "description": description}}).encode()


def test_each_message_names_its_batch_and_place_and_only_the_last_commits() -> None:
    assert batch.headers("b1", 1, commit=False) == {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "1"}
    assert batch.headers("b1", 3, commit=True, msg_id="7-3") == {
        "Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1", "Nats-Msg-Id": "7-3"}


def test_an_abort_commits_with_a_gap_so_the_leader_drops_the_batch() -> None:
    assert batch.abort_headers("b1", 2) == {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "4",
                                            "Nats-Batch-Commit": "1"}


def test_batch_ids_are_fresh_and_within_the_servers_64_bytes() -> None:
    ids = {batch.new_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) <= 64 for i in ids)


def test_the_commits_puback_gives_every_messages_offset() -> None:
    got = batch.parse_reply(_ack(seq=12, batch="b1", count=3), batch="b1", count=3)
    assert got == batch.Committed(batch="b1", count=3, last=12)
    assert got.offsets() == [10, 11, 12]


def test_an_empty_reply_is_a_staged_message() -> None:
    assert batch.parse_reply(b"", batch="b1", count=1) == batch.Staged()


@pytest.mark.parametrize("reply", [
    _ack(seq=5),  # a server that ignored the batch headers and stored the message alone
    _ack(seq=5, batch="other", count=2),
    _ack(seq=5, batch="b1", count=3),
    _ack(seq=1, batch="b1", count=2),  # a sequence too low to hold the batch
    b"not json",
    b"[1, 2]",
])
def test_a_reply_that_does_not_confirm_this_batch_is_unexpected(reply: bytes) -> None:
    assert isinstance(batch.parse_reply(reply, batch="b1", count=2), batch.Unexpected)


@pytest.mark.parametrize(("code", "outcome", "final"), [
    # Rejections from the answering server's state: it need not be the server that stored the
    # batch (a stale leader beside the new one, around a partition's heal): info, not fail.
    (10176, INFO, False),  # incomplete: a gap, or a server that never saw the batch
    (10174, INFO, False),  # the stream does not allow atomic publish (in that server's config)
    (10210, INFO, False),  # too many batches in flight (on that server)
    (10201, INFO, True),  # a duplicate Msg-Id: the same batch meets it again
    (10158, INFO, False),  # a Msg-Id in a proposal not yet applied: applied or dropped later
    # Faults of the message itself, which every server finds alike: nothing stored.
    (10200, FAIL, True),
    (10175, FAIL, True),
    (10199, FAIL, True),
    (10071, INFO, False),  # wrong last sequence: also an error of applying a proposed batch
    (10077, INFO, False),  # maximum messages exceeded, likewise
])
def test_a_rejected_commit_fails_only_for_faults_every_server_finds_alike(code: int, outcome: str,
                                                                          final: bool) -> None:
    got = batch.parse_reply(_error(code, "why"), batch="b1", count=2)
    assert isinstance(got, batch.Rejected)
    assert (got.code, got.outcome(), got.final) == (code, outcome, final)
    assert str(got) == f"rejected ({code}): why"


# The reply nats-server 2.15.1 gave a batch whose Msg-Ids the stream held, verbatim.
HELD_REPLY = (b'{"error":{"code":400,"err_code":10201,"description":"atomic publish batch contains duplicate '
              b'message id"},"stream":"lq-1","seq":0}')


def test_a_commit_rejected_for_held_msg_ids_is_held_and_names_no_offset() -> None:
    got = batch.parse_reply(HELD_REPLY, batch="b1", count=2)
    assert isinstance(got, batch.Rejected) and got.held and got.outcome() == INFO
    # A resend of a batch so rejected stored nothing, and acknowledges each value.
    assert batch.Held().sends(3, [7, 8]) == [["send", 3, [None, 7]], ["send", 3, [None, 8]]]
    for code in (10158, 10176, 10071):
        assert not batch.parse_reply(_error(code), batch="b1", count=2).held


@pytest.mark.parametrize(("version", "ok"), [
    ("v2.15.1", True), ("2.12.1", True), ("v2.12.0", False), ("v2.11.9", False), ("", False),
])
def test_msg_ids_in_a_batch_came_with_nats_server_2_12_1(version: str, ok: bool) -> None:
    assert batch.supports_msg_ids(version) is ok


@pytest.mark.parametrize(("value", "words"), [
    ([["send", 1, 1], ["poll"]], "polls"),
    ([["send", 1, 1], ["send", 2, 1]], "keys [1, 2]"),
    ([["send", 1, v] for v in range(1001)], "at most 1000"),
])
def test_transactions_a_batch_cannot_be_are_refused(value: list, words: str) -> None:
    why = batch.refusal(value)
    assert why is not None and words in why


def test_sends_to_one_key_make_a_batch() -> None:
    assert batch.refusal([["send", 3, 1], ["send", 3, 2]]) is None


@pytest.mark.parametrize(("version", "ok"), [
    ("v2.15.1", True), ("2.12.0", True), ("v2.12.0-RC.1", True), ("v3.0.0", True),
    ("v2.11.9", False), ("v2.9.10", False), ("unknown", False), ("", False),
])
def test_atomic_publish_came_with_nats_server_2_12(version: str, ok: bool) -> None:
    assert batch.supports_atomic(version) is ok


# -- refused at config load, in one line naming the key (no server started) ------------------

OLD_SERVER = next((p for p in ("/usr/bin/nats-server", "/usr/sbin/nats-server") if os.access(p, os.X_OK)), None)


@pytest.mark.parametrize("values", [{"txn": True}, {"guarantee": "exactly-once"}])  # it brings txn
def test_transactions_on_the_pinned_server_are_accepted(values: dict) -> None:
    assert apply_guarantee(resolve_config(None, {"system": "jetstream", **values})).txn


def test_the_workload_makes_batches_a_jetstream_transaction_can_hold() -> None:
    cfg = resolve_config(None, {"system": "jetstream", "txn": True, "seed": 7})
    gen = make_generator(cfg)
    ops = []
    for w in range(4):
        ctx = Context(worker=w, process=w)
        for _ in range(300):
            op = gen.op(ctx)
            ops.append(op)
            if op.f == "assign":  # answered, so the worker goes on to sends and polls
                gen.update(ctx, replace(op, type=OK))
    txns = [op.value for op in ops if op.f in ("send", "txn")]
    assert txns and all(batch.refusal(value) is None for value in txns)
    assert any(len(value) > 1 for value in txns)
    assert any(op.f == "poll" and op.value == [["poll"]] for op in ops)  # polls go alone


@pytest.mark.skipif(OLD_SERVER is None, reason="no nats-server older than 2.12 here (Debian's: apt-get install nats-server)")
def test_a_server_without_atomic_batches_is_refused_naming_its_version(tmp_path: Path) -> None:
    version = server_version(str(OLD_SERVER))
    assert not batch.supports_atomic(version)
    line = _refused(tmp_path, "--txn", yaml=f"system: jetstream\njetstream: {{binary: {OLD_SERVER}}}\n")
    assert f"ConfigError: txn: nats-server {version} ({OLD_SERVER}) has no atomic batch publish" in line, line


def test_without_transactions_an_old_server_is_not_asked_about() -> None:
    cfg = resolve_config(None, {"system": "jetstream", "jetstream": {"binary": OLD_SERVER or sys.executable}})
    assert not cfg.txn


# -- the checker reads batch-shaped histories as it reads Kafka's ----------------------------

def _batch_history(reads: list[tuple[int, int]]) -> list:
    """A committed batch of 1, 2 at offsets 1-2 of key 1, an aborted one of 3, 4 (never
    stored), one more send of 5 at offset 3; then a read of key 1 from the start."""
    h = H()
    h.txn(0, [("send", 1, 1, 1), ("send", 1, 2, 2)])
    h.txn(1, [("send", 1, 3), ("send", 1, 4)], type="fail", abort=True)
    h.send(0, 1, 5, offset=3)
    h.assign(2, [1], seek_to_beginning=True)
    h.poll(2, {1: reads})
    return h.ops


@pytest.mark.parametrize(("reads", "bad"), [
    ([(1, 1), (2, 2), (3, 5)], set()),
    ([(1, 1), (3, 5)], {"lost-write"}),  # half of a committed batch visible: torn
    ([(1, 1), (2, 2), (3, 3)], {"G1a"}),  # a value of the aborted batch visible
])
def test_the_checker_judges_batches_as_transactions(reads: list, bad: set) -> None:
    r = check_history(_batch_history(reads), CheckOptions(txn=True))
    assert r["valid"] is (not bad) and bad <= set(r["bad_error_types"]), r["bad_error_types"]


def test_an_ops_attempt_errors_keep_the_first_and_the_last_and_the_count() -> None:
    from logquake.systems.jetstream.client import _attempt_errors
    assert _attempt_errors(["a", "b"]) == "a; b"
    assert _attempt_errors(["a", "b", "c", "d"]) == "a; b; c; d"
    assert _attempt_errors([str(i) for i in range(9)]) == "9 attempts: first 0; ...; last 6; 7; 8"


def _soak_send(type_: str) -> Timed:
    """Soak 20261202T163620 op 20056 in small: a batch of 3, 4 to key 1, stored at 3, 4 by an
    attempt answered by another server's rejection; the op recorded as `type_` (the old
    client's fail, the fixed one's ok with offsets unknown after meeting its Msg-Ids held)."""
    h = Timed()
    h.batch(0.5, 0.6, 0, 1, [1, 2], [1, 2])
    if type_ == "ok":
        h.batch(1.0, 3.0, 0, 1, [3, 4], [None, None], duplicate=True, attempts=[0, 10**8])
    else:
        h.batch(1.0, 3.0, 0, 1, [3, 4], type_=type_, error="message 2: rejected (10201)")
    h.poll(4.0, 2, {1: [(3, 3), (4, 4)]})
    h.final_read(10.0, 3, {1: 5}, {1: [(1, 1), (2, 2), (3, 3), (4, 4)]})
    return h


@pytest.mark.parametrize(("type_", "bad"), [("fail", ["G1a"]), ("info", []), ("ok", [])])
def test_a_send_whose_msg_ids_were_held_is_a_writer_not_an_aborted_one(type_: str, bad: list) -> None:
    from tests.checker.test_batch_resend import check
    for guarantee in ("at-least-once", "exactly-once"):
        r = check(_soak_send(type_), guarantee)
        assert r["bad_error_types"] == bad, (guarantee, r["anomalies"])
