"""The Kafka listener over a real socket: answers in request order whatever order handlers
finish in, none for acks=0, and a failed handler closes the connection after the answers
owed before it."""

from __future__ import annotations

import asyncio
import struct

from kafka.protocol.metadata import MetadataRequest

from logquake.broker.codec import Encoded, Request
from logquake.broker.server import NO_RESPONSE, KafkaServer


def _frame(corr: int) -> bytes:
    req = MetadataRequest[0](topics=[])
    req.with_header(correlation_id=corr, client_id="t")
    return bytes(req.encode(header=True, framed=True))


async def _read_answers(reader: asyncio.StreamReader) -> list[tuple[int, bytes]]:
    out = []
    while True:
        try:
            (n,) = struct.unpack(">i", await reader.readexactly(4))
        except asyncio.IncompleteReadError:
            return out  # the server closed the connection
        body = await reader.readexactly(n)
        out.append((struct.unpack(">i", body[:4])[0], body[4:]))


async def _serve_and_ask(handler, corrs: list[int]) -> list[tuple[int, bytes]]:
    server = KafkaServer(handler, "127.0.0.1", 0, max_frame_bytes=1 << 20, max_in_flight=4)
    await server.start()
    assert server._server is not None
    port = server._server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(_frame(c) for c in corrs))  # pipelined, more than max_in_flight
        await writer.drain()
        writer.write_eof()  # the server answers what it owes, then closes
        return await asyncio.wait_for(_read_answers(reader), 10)
    finally:
        writer.close()
        await server.close()


def test_answers_in_request_order_whatever_order_handlers_finish() -> None:
    async def main() -> list[tuple[int, bytes]]:
        loop = asyncio.get_running_loop()
        futures: list[tuple[int, asyncio.Future]] = []

        def handler(req: Request):
            c = req.correlation_id
            body = Encoded(b"body-%d" % c, flexible=False)
            if c == 5:
                return NO_RESPONSE  # an acks=0 produce: nothing is owed
            if c % 2:
                return body  # answered at once
            fut = loop.create_future()
            futures.append((c, fut))
            # Later requests finish first: the first future is resolved last.
            loop.call_later(0.05 * (20 - c), fut.set_result, body)
            return fut

        return await _serve_and_ask(handler, list(range(1, 13)))

    got = asyncio.run(main())
    assert [c for c, _ in got] == [c for c in range(1, 13) if c != 5]
    assert all(body == b"body-%d" % c for c, body in got)


def test_failed_handler_closes_after_the_answers_owed_before_it() -> None:
    async def main() -> list[tuple[int, bytes]]:
        loop = asyncio.get_running_loop()

        def handler(req: Request):
            c = req.correlation_id
            if c == 3:
                fut = loop.create_future()
                loop.call_later(0.05, fut.set_exception, RuntimeError("handler bug"))
                return fut
            if c == 2:
                fut = loop.create_future()
                loop.call_later(0.1, fut.set_result, Encoded(b"late", flexible=False))
                return fut
            return Encoded(b"ok-%d" % c, flexible=False)

        return await _serve_and_ask(handler, [1, 2, 3, 4])

    # 2 finishes after 3 failed: it is still answered (it was owed first), then the close.
    assert asyncio.run(main()) == [(1, b"ok-1"), (2, b"late")]
