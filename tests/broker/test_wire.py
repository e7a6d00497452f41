"""The broker's unjoined Raft encoder must produce raft.encode_messages' exact bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logquake.broker.raft import Entry, Message, MsgKind, decode_messages, encode_messages
from logquake.broker.wire import encode_message_parts

entries = st.lists(st.builds(Entry, st.integers(0, 2**40), st.integers(1, 2**40), st.binary(max_size=64)),
                   max_size=4).map(tuple)
messages = st.builds(Message, st.sampled_from(list(MsgKind)), st.text(max_size=8), st.integers(0, 2**16),
                     st.integers(0, 2**16), st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**40),
                     entries, st.integers(0, 2**40), st.booleans(), st.integers(0, 2**40))


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, max_size=5))
def test_parts_join_to_encode_messages(msgs) -> None:
    frame = b"".join(encode_message_parts(msgs))
    assert frame == encode_messages(msgs)
    assert decode_messages(frame) == msgs
