"""The Kafka listener: one asyncio task per connection, answers in request order.

A request is dispatched as soon as it is decoded: the handler's synchronous part runs in
arrival order (so a connection's produce requests are proposed in order), and it may return
an awaitable for the rest (waiting for commit, a long-poll fetch). Responses are written in
request order by the connection's writer, whatever order the awaitables finish in.

Backpressure: at most `max_in_flight` requests of one connection are outstanding; beyond
that the connection is not read until the oldest is answered, and the writer waits for
the socket to drain. Every request that is not served is logged with its peer and reason.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from logquake.broker.codec import BadRequest, FrameError, Request, RequestDecoder, encode_response

__all__ = ["KafkaServer", "NO_RESPONSE", "Handler"]

log = logging.getLogger("logquake.broker.server")


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE = _NoResponse()  # acks=0 produce: the client expects nothing back

# The handler gets a request and returns a response body (a kafka-python response object or a
# dict of its fields), NO_RESPONSE, or an awaitable of one of those. Raising closes the connection.
Handler = Callable[[Request], Any]


class KafkaServer:
    """Serves Kafka requests on host:port through `handler`."""

    def __init__(self, handler: Handler, host: str, port: int, *, max_frame_bytes: int,
                 max_in_flight: int = 128) -> None:
        self._handler = handler
        self._host, self._port = host, port
        self._max_frame = max_frame_bytes
        self._max_in_flight = max_in_flight
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._port, reuse_address=True,
                                                  limit=1 << 20)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await _Connection(self, reader, writer, f"{peer[0]}:{peer[1]}" if peer else "?").run()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(task)
            writer.close()


class _Connection:
    def __init__(self, server: KafkaServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 peer: str) -> None:
        self.s = server
        self.reader, self.writer, self.peer = reader, writer, peer
        self.decoder = RequestDecoder(max_frame_bytes=server._max_frame)
        # Responses in request order: each item is (request, awaitable or value).
        self.pending: asyncio.Queue[tuple[Request | BadRequest, Any] | None] = asyncio.Queue(server._max_in_flight)

    async def run(self) -> None:
        w = asyncio.create_task(self._write_loop())
        r = asyncio.create_task(self._read_loop())
        try:
            done, _ = await asyncio.wait({r, w}, return_when=asyncio.FIRST_COMPLETED)
            if r in done and not w.done():
                await self.pending.put(None)  # let the writer answer what was read, then stop
                await w
        finally:
            r.cancel()
            w.cancel()
            await asyncio.gather(r, w, return_exceptions=True)

    async def _read_loop(self) -> None:
        while True:
            data = await self.reader.read(1 << 18)
            if not data:
                return
            try:
                reqs = self.decoder.feed(data)
            except FrameError as e:
                log.warning("closing connection from %s: %s", self.peer, e)
                return
            for req in reqs:
                if isinstance(req, BadRequest):
                    log.warning("rejected request from %s (api %d v%d, correlation %d): %s%s", self.peer,
                                req.api_key, req.api_version, req.correlation_id, req.reason,
                                "" if req.reply else "; closing the connection")
                    await self.pending.put((req, req.reply))
                    if req.reply is None:
                        return
                    continue
                await self.pending.put((req, self._dispatch(req)))

    def _dispatch(self, req: Request) -> Any:
        try:
            out = self.s._handler(req)
        except Exception:  # noqa: BLE001 - a handler bug must not take the broker down
            log.exception("handler failed on api %d v%d from %s", req.api_key, req.api_version, self.peer)
            return None
        if inspect.isawaitable(out):
            return asyncio.ensure_future(out)
        return out

    async def _write_loop(self) -> None:
        while True:
            item = await self.pending.get()
            if item is None:
                return
            req, out = item
            if isinstance(req, BadRequest):
                if out is None:
                    return
                self.writer.write(out)
                await self.writer.drain()
                continue
            if isinstance(out, asyncio.Future):
                try:
                    out = await out
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001
                    log.exception("handler failed on api %d v%d from %s", req.api_key, req.api_version,
                                  self.peer)
                    out = None
            if out is NO_RESPONSE:
                continue
            if out is None:  # handler failure: the client cannot be answered sensibly
                self.writer.close()
                return
            try:
                frame = encode_response(req.api_key, req.api_version, req.correlation_id, out)
            except Exception:  # noqa: BLE001 - a response we cannot encode is our bug, not a crash
                log.exception("cannot encode the response to api %d v%d for %s; closing", req.api_key,
                              req.api_version, self.peer)
                self.writer.close()
                return
            self.writer.write(frame)
            if self.pending.empty():
                await self.writer.drain()

