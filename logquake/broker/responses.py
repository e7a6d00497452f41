"""Hand-written encoders for the hot responses, Produce, Fetch and Metadata, byte for byte
what kafka-python's schema encoder writes for the same fields (tests/broker/test_codec.py
compares them over every version served).

Most of a harness run's requests are Produce and Fetch; building kafka-python's response
objects and walking their schemas cost more CPU than everything else the handlers do for
them. Metadata is rarer (each client refreshes every 2 s) but lists every topic the client
knows, which grows with key rotation: with kafka-python's objects it was ~6 % of a broker's
event-loop CPU in a 5-node harness run. Here a response is a few `struct.pack` calls over plain tuples, returned as an
`Encoded` body that `codec.encode_response` only frames. Sans-I/O like codec.py.

Fields the broker always answers the same way are constants here: throttle time 0,
log append time -1, log start offset 0 and no record errors (Produce); top-level error 0,
session id 0 and preferred read replica -1 (Fetch); authorized operations not given
(Metadata: INT32_MIN, as kafka-python writes for None).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from logquake.broker.codec import Encoded

__all__ = ["FetchPartition", "MetadataBroker", "MetadataPartition", "MetadataTopic", "ProducePartition",
           "fetch_response", "metadata_response", "produce_response"]

# (topic, partition index, error code, base offset)
ProducePartition = tuple[str, int, int, int]
# (partition index, error code, high watermark, last stable offset, log start offset,
#  aborted transactions as (producer id, first offset) pairs or None, records)
FetchPartition = tuple[int, int, int, int, int, Sequence[tuple[int, int]] | None, bytes]

_I16 = struct.Struct(">h").pack
_I32 = struct.Struct(">i").pack
_PART = struct.Struct(">ihq").pack  # index/partition, error code, base offset/high watermark
_Q = struct.Struct(">q").pack
_QQ = struct.Struct(">qq").pack
_NO_TAGS = b"\x00"
_PRODUCE_FLEXIBLE = 9
_FETCH_FLEXIBLE = 12


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    b = s.encode()
    return (_uvarint(len(b) + 1) if flexible else _I16(len(b))) + b


def _count(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32(n)


def produce_response(version: int, partitions: Sequence[ProducePartition]) -> Encoded:
    """ProduceResponse v3+ (up to 9) for these partitions, grouped by topic in first-seen order."""
    flex = version >= _PRODUCE_FLEXIBLE
    by_topic: dict[str, list[ProducePartition]] = {}
    for p in partitions:
        by_topic.setdefault(p[0], []).append(p)
    # log append time -1; log start offset 0 (v5+); no record errors, no message (v8+)
    tail = _Q(-1) + (_Q(0) if version >= 5 else b"")
    if version >= 8:
        tail += _count(0, flex) + (b"\x00" if flex else _I16(-1))
    if flex:
        tail += _NO_TAGS
    out = [_count(len(by_topic), flex)]
    for topic, ps in by_topic.items():
        out.append(_string(topic, flex))
        out.append(_count(len(ps), flex))
        for _, index, err, base in ps:
            out.append(_PART(index, err, base))
            out.append(tail)
        if flex:
            out.append(_NO_TAGS)
    out.append(_I32(0))  # throttle time
    if flex:
        out.append(_NO_TAGS)
    return Encoded(b"".join(out), flexible=flex)


def fetch_response(version: int, topics: Sequence[tuple[str, Sequence[FetchPartition]]]) -> Encoded:
    """FetchResponse v4+ (up to 12): throttle 0, error 0, session 0, these topics' partitions."""
    flex = version >= _FETCH_FLEXIBLE
    out = [_I32(0)]  # throttle time
    if version >= 7:
        out.append(b"\x00\x00\x00\x00\x00\x00")  # error code 0, session id 0
    out.append(_count(len(topics), flex))
    for topic, parts in topics:
        out.append(_string(topic, flex))
        out.append(_count(len(parts), flex))
        for index, err, hw, lso, start, aborted, records in parts:
            out.append(_PART(index, err, hw))
            out.append(_Q(lso))
            if version >= 5:
                out.append(_Q(start))
            if aborted is None:
                out.append(b"\x00" if flex else _I32(-1))
            else:
                out.append(_count(len(aborted), flex))
                for pid, first in aborted:
                    out.append(_QQ(pid, first))
                    if flex:
                        out.append(_NO_TAGS)
            if version >= 11:
                out.append(_I32(-1))  # preferred read replica
            out.append(_uvarint(len(records) + 1) if flex else _I32(len(records)))
            out.append(records)
            if flex:
                out.append(_NO_TAGS)
        if flex:
            out.append(_NO_TAGS)
    if flex:
        out.append(_NO_TAGS)
    return Encoded(b"".join(out), flexible=flex)


# (node id, host, port, rack or None)
MetadataBroker = tuple[int, str, int, str | None]
# (error code, partition index, leader id, leader epoch, replica nodes, isr nodes, offline replicas)
MetadataPartition = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]
# (error code, name, topic id (a UUID) or None, is internal, partitions)
MetadataTopic = tuple[int, str | None, Any, bool, Sequence[MetadataPartition]]
_METADATA_FLEXIBLE = 9
_NO_AUTHORIZED_OPS = _I32(-(2**31))  # authorized operations not asked for (KIP-430's INT32_MIN)
_NULL_UUID = bytes(16)
_BROKER = struct.Struct(">i").pack
_MPART_V0 = struct.Struct(">hii").pack  # error code, partition index, leader id
_MPART_V7 = struct.Struct(">hiii").pack  # + leader epoch


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else _I16(-1)
    return _string(s, flexible)


def _int32s(ns: Sequence[int], flexible: bool) -> bytes:
    return _count(len(ns), flexible) + struct.pack(f">{len(ns)}i", *ns)


def metadata_response(version: int, brokers: Sequence[MetadataBroker], cluster_id: str | None,
                      controller_id: int, topics: Sequence[MetadataTopic]) -> Encoded:
    """MetadataResponse v0-12: throttle 0, no authorized operations (not asked for)."""
    flex = version >= _METADATA_FLEXIBLE
    out = [_I32(0)] if version >= 3 else []  # throttle time
    out.append(_count(len(brokers), flex))
    for node_id, host, port, rack in brokers:
        out.append(_BROKER(node_id))
        out.append(_string(host, flex))
        out.append(_I32(port))
        if version >= 1:
            out.append(_nullable_string(rack, flex))
        if flex:
            out.append(_NO_TAGS)
    if version >= 2:
        out.append(_nullable_string(cluster_id, flex))
    if version >= 1:
        out.append(_I32(controller_id))
    out.append(_count(len(topics), flex))
    for err, name, topic_id, internal, parts in topics:
        out.append(_I16(err))
        out.append(_nullable_string(name, flex))
        if version >= 10:
            out.append(_NULL_UUID if topic_id is None else topic_id.bytes)
        if version >= 1:
            out.append(b"\x01" if internal else b"\x00")
        out.append(_count(len(parts), flex))
        for p_err, index, leader, epoch, replicas, isr, offline in parts:
            out.append(_MPART_V7(p_err, index, leader, epoch) if version >= 7 else _MPART_V0(p_err, index, leader))
            out.append(_int32s(replicas, flex))
            out.append(_int32s(isr, flex))
            if version >= 5:
                out.append(_int32s(offline, flex))
            if flex:
                out.append(_NO_TAGS)
        if version >= 8:
            out.append(_NO_AUTHORIZED_OPS)
        if flex:
            out.append(_NO_TAGS)
    if 8 <= version <= 10:
        out.append(_NO_AUTHORIZED_OPS)  # cluster authorized operations
    if flex:
        out.append(_NO_TAGS)
    return Encoded(b"".join(out), flexible=flex)
