"""The fetch long poll's wake-up, on a one-node in-process broker."""

from __future__ import annotations

import asyncio
import inspect
import io

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from logquake.broker.codec import Request, encode_response
from tests.broker.clients import long_poll_fetch
from tests.broker.conftest import leading_partition, one_node_config


def _batch(value: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=1_000, key=None, value=value, headers=[])
    return bytes(b.build())


def _fetch(topic: str, offset: int, max_wait_ms: int) -> Request:
    body = long_poll_fetch(topic, offset, max_wait_ms=max_wait_ms)
    return Request(api_key=1, api_version=12, correlation_id=1, client_id="t", body=body, size=0)


def _produce(topic: str, value: bytes) -> Request:
    P = ProduceRequest[9]
    body = P(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=_batch(value))])])
    return Request(api_key=0, api_version=9, correlation_id=2, client_id="t", body=body, size=0)


def test_a_commit_between_the_fetch_read_and_its_wait_still_wakes_it(tmp_path) -> None:
    """The server runs a fetch's synchronous part (read: nothing at the high watermark) in
    data_received and starts the long poll as a task, whose first step comes a loop turn or
    more later; a commit applied in between must not leave it asleep for max_wait."""

    async def main() -> None:
        async with leading_partition(one_node_config(tmp_path), new_topic="lp") as (node, rep):
            hw = rep.state.next_offset
            poll = node.api.handle(_fetch("lp", hw, max_wait_ms=20_000))
            assert inspect.isawaitable(poll)  # nothing to read yet: a long poll
            # The commit lands before the long poll's first step (the window, made wide).
            appended = node.api.handle(_produce("lp", b"late"))
            await asyncio.wait_for(asyncio.ensure_future(appended), 10)
            assert rep.state.next_offset > hw
            # Woken by that commit, not timed out: 10 s is far below the 20 s max wait.
            resp = await asyncio.wait_for(asyncio.ensure_future(poll), 10)
            frame = encode_response(1, 12, 1, resp)
            decoded = FetchResponse[12].decode(io.BytesIO(frame[4 + 4 + 1:]))  # size, correlation id, tags
            part = decoded.responses[0].partitions[0]
            assert part.error_code == 0 and b"late" in part.records

    asyncio.run(main())
