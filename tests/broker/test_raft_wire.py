"""The peer wire format of Raft messages: exact round trips, and malformed input always rejected."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logquake.broker.raft import Entry, Message, MessageDecodeError, MsgKind, decode_messages, encode_messages

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)

entries = st.lists(st.builds(Entry, U64, U64, st.binary(max_size=64)), max_size=4).map(tuple)
messages = st.builds(
    Message,
    st.sampled_from(list(MsgKind)),
    st.text(max_size=20),
    U32,
    U32,
    U64,
    U64,
    U64,
    entries,
    U64,
    st.booleans(),
    U64,
)


# The machine is shared: no deadlines or speed health checks, only correctness.
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@RELAXED
@given(st.lists(messages, max_size=5))
def test_round_trip(msgs: list[Message]) -> None:
    assert decode_messages(encode_messages(msgs)) == msgs


def test_round_trip_accepts_memoryview_and_big_batch() -> None:
    data = bytes(range(256)) * 4
    msgs = [
        Message(
            MsgKind.APPEND, "topic-0", 1, 2, 7, 6, 99, tuple(Entry(7, 100 + k, data) for k in range(64)), 98
        ),
        Message(MsgKind.HEARTBEAT_RESP, "__meta", 2, 1, 7, index=12),
    ]
    buf = encode_messages(msgs)
    assert decode_messages(memoryview(buf)) == msgs
    assert decode_messages(bytearray(buf)) == msgs
    assert len(buf) < 64 * (len(data) + 40) + 200  # compact: ~20 bytes per entry beyond its data


def test_every_truncation_is_rejected() -> None:
    msgs = [
        Message(MsgKind.APPEND, "g", 1, 2, 3, 2, 5, (Entry(3, 6, b"abc"), Entry(3, 7, b"")), 4),
        Message(MsgKind.VOTE_RESP, "g", 1, 3, 3, reject=True),
    ]
    buf = encode_messages(msgs)
    for cut in range(len(buf)):
        with pytest.raises(MessageDecodeError):
            decode_messages(buf[:cut])
    with pytest.raises(MessageDecodeError):
        decode_messages(buf + b"\0")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b"\x02" + b[1:],  # unknown version
        lambda b: b[:5] + b"\x09" + b[6:],  # unknown kind
        lambda b: b[:6] + b"\x02" + b[7:],  # unknown flag
        lambda b: b[:1] + (2**32 - 1).to_bytes(4, "little") + b[5:],  # absurd message count
        lambda b: b[:57] + (2**32 - 1).to_bytes(4, "little") + b[61:],  # absurd entry count
        lambda b: b[:61] + b"\xff" + b[62:],  # group name not UTF-8
    ],
)
def test_malformed_frames_raise_the_specific_error(mutate) -> None:  # noqa: ANN001
    buf = encode_messages([Message(MsgKind.APPEND, "g", 1, 2, 3, entries=(Entry(3, 1, b"x"),))])
    with pytest.raises(MessageDecodeError):
        decode_messages(mutate(buf))


@settings(RELAXED, max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_never_raises_anything_else(buf: bytes) -> None:
    try:
        decode_messages(buf)
    except MessageDecodeError:
        pass


def test_random_bit_flips_are_rejected_or_decode_cleanly() -> None:
    rng = random.Random(1)
    base = encode_messages([Message(MsgKind.APPEND, "p-1", 1, 2, 3, 2, 5, (Entry(3, 6, b"payload"),), 4)])
    for _ in range(2000):
        b = bytearray(base)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        try:
            decode_messages(bytes(b))
        except MessageDecodeError:
            pass
