"""The produce handler's wait for its appends: answered when all resolve, or at the request's timeout."""

from __future__ import annotations

import asyncio
import io

from kafka.protocol.producer import ProduceResponse

from logquake.broker.codec import Request, encode_response
from logquake.broker.handlers import KafkaApi
from logquake.broker.replica import AppendOutcome


def _request(timeout_ms: int) -> Request:
    body = type("Body", (), {"timeout_ms": timeout_ms})()
    return Request(api_key=0, api_version=9, correlation_id=1, client_id="t", body=body, size=0)


def _answers(resp) -> list[tuple[str, int, int, int]]:  # noqa: ANN001
    frame = encode_response(0, 9, 1, resp)
    decoded = ProduceResponse[9].decode(io.BytesIO(frame[4 + 4 + 1:]))  # size, correlation id, header tags
    return [(t.name, p.index, p.error_code, p.base_offset)
            for t in decoded.responses for p in t.partition_responses]


def test_answered_once_every_append_resolves_and_at_the_timeout_otherwise() -> None:
    api = object.__new__(KafkaApi)  # _produce_wait uses no node state

    async def main() -> None:
        loop = asyncio.get_running_loop()
        a, b = loop.create_future(), loop.create_future()
        out = api._produce_wait(_request(60_000), [("t", 0, a), ("t", 1, b), ("u", 0, AppendOutcome(error_code=6))])
        a.set_result(AppendOutcome(error_code=0, base_offset=10))
        await asyncio.sleep(0.01)
        assert not out.done()
        b.set_result(AppendOutcome(error_code=0, base_offset=20))
        resp = await asyncio.wait_for(out, 1)  # long before the 60 s timeout
        assert _answers(resp) == [("t", 0, 0, 10), ("t", 1, 0, 20), ("u", 0, 6, -1)]

        c, d = loop.create_future(), loop.create_future()
        t0 = loop.time()
        out = api._produce_wait(_request(50), [("t", 0, c), ("t", 1, d)])
        c.set_result(AppendOutcome(error_code=0, base_offset=30))
        resp = await asyncio.wait_for(out, 5)
        assert loop.time() - t0 >= 0.045
        assert _answers(resp) == [("t", 0, 0, 30), ("t", 1, 7, -1)]  # REQUEST_TIMED_OUT
        d.set_result(AppendOutcome(error_code=0, base_offset=40))  # too late: changes nothing
        await asyncio.sleep(0)

    asyncio.run(main())
