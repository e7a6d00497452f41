"""Raft messages as a list of byte strings for writev: raft.encode_messages' format, unjoined.

`raft.encode_messages` ends with `b"".join(parts)`, copying every entry's data once per
follower; under acks=all load that copy was up to a quarter of the leader's CPU. The
transport writes these parts with `writelines` instead. The format is raft.py's (its
structs are reused, not restated), and tests/broker/test_wire.py checks byte equality
with `encode_messages`, so the two cannot drift apart silently.
"""

from __future__ import annotations

from collections.abc import Sequence

from logquake.broker import raft

__all__ = ["encode_message_parts"]


def encode_message_parts(msgs: Sequence[raft.Message]) -> list[bytes]:
    """`raft.encode_messages(msgs)` split into parts whose concatenation is that frame."""
    parts: list[bytes] = [raft._FRAME.pack(raft._VERSION, len(msgs))]
    pack_msg = raft._MSG.pack
    pack_ent = raft._ENT.pack
    append = parts.append
    for m in msgs:
        g = m.group.encode()
        append(pack_msg(m.kind, 1 if m.reject else 0, len(g), m.frm, m.to, m.term, m.log_term, m.index,
                        m.commit, m.reject_hint, len(m.entries)))
        append(g)
        for e in m.entries:
            append(pack_ent(e.term, e.index, len(e.data)))
            append(e.data)
    return parts
