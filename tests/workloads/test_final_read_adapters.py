"""The final read through both adapters against real brokers: a final assign records each
key's end of the log (`ends`), final polls the consumer's position (`positions`), and the
position reaches the end even where the log ends in a transaction marker no poll returns."""

from __future__ import annotations

import time

import pytest

from logquake.history import OK
from tests.workloads import test_adapters
from tests.workloads.test_adapters import CLIENTS, _client, _op

cluster = test_adapters.cluster  # the module-scoped fixture: three brokers on 127.0.0.1


def _final_read(cluster, kind, keys, *, txn=False, timeout=60.0):
    """A fresh client's final read of `keys`: the ends its assign recorded, what its polls
    read per key, and its last positions."""
    c = _client(cluster, kind, txn=txn)
    try:
        done = c.invoke(_op("assign", keys, seek_to_beginning=True, final=True))
        assert done.type == OK, done
        ends = {int(k): e for k, e in done.get("ends").items()}
        read: dict[int, list] = {}
        positions: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while any(positions.get(k, 0) < ends[k] for k in keys) and time.monotonic() < deadline:
            done = c.invoke(_op("poll", [["poll"]], final=True))
            assert done.type == OK and done.get("final") is True, done
            for k, pairs in done.value[0][1].items():
                read.setdefault(int(k), []).extend(v for _, v in pairs)
            positions.update({int(k): p for k, p in done.get("positions").items()})
        return ends, read, positions
    finally:
        c.close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_final_assign_records_the_high_watermark_and_polls_reach_it(cluster, kind):
    key = 300 if kind == "confluent" else 400
    c = _client(cluster, kind)
    try:
        for v in (1, 2, 3):
            assert c.invoke(_op("send", [["send", key, v]])).type == OK
    finally:
        c.close()
    ends, read, positions = _final_read(cluster, kind, [key])
    assert ends == {key: 3}
    assert read[key] == [1, 2, 3]
    assert positions[key] == 3


@pytest.mark.parametrize("kind", CLIENTS)
def test_the_position_passes_a_trailing_commit_marker(cluster, kind):
    key = 310 if kind == "confluent" else 410
    c = _client(cluster, kind, txn=True)
    try:
        done = c.invoke(_op("txn", [["send", key, 1], ["send", key, 2]]))
        assert done.type == OK, done
    finally:
        c.close()
    # The coordinator writes the markers after EndTxn answers (as Kafka does), so the last
    # stable offset may trail the commit briefly: ask again, as the drain does.
    deadline = time.monotonic() + 30.0
    ends, read, positions = _final_read(cluster, kind, [key], txn=True)
    while ends[key] != 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        ends, read, positions = _final_read(cluster, kind, [key], txn=True)
    assert ends == {key: 3}  # two records and the commit marker: the last stable offset
    assert read[key] == [1, 2]
    assert positions[key] == 3
