"""The Kafka listener: per connection a Protocol that decodes and dispatches, and a writer task.

A request is dispatched as soon as it is decoded: the handler's synchronous part runs in
arrival order (so a connection's produce requests are proposed in order), and it may return
an awaitable for the rest (waiting for commit, a long-poll fetch). Responses are written in
request order, whatever order the awaitables finish in.

Backpressure: at most `max_in_flight` requests of one connection are outstanding; beyond
that the connection is not read until the oldest is answered, and nothing more is
written while the socket's buffer is above its high-water mark. Every request that is not served is logged with its peer and reason.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
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
        self._conns: set[_Connection] = set()

    async def start(self) -> None:
        await self.bind()
        await self.serve()

    async def bind(self) -> None:
        """Take the address without listening yet: a client's connect is refused until `serve`."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), self._host, self._port,
                                                reuse_address=True, start_serving=False)

    async def serve(self) -> None:
        """Listen and accept connections (OSError if the address is taken after all)."""
        if self._server is None:
            await self.bind()
        assert self._server is not None
        await self._server.start_serving()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for c in list(self._conns):
            c.abort()


class _Connection(asyncio.Protocol):
    """One client connection: decode on arrival, dispatch in order, answer in order.

    A Protocol rather than streams: received bytes go straight to the decoder (StreamReader
    would copy them twice more), and reading pauses while `max_in_flight` answers are owed.

    No writer task: whenever the oldest owed answer may be ready (a request decoded, an
    awaited handler finished, the socket drained), `_pump` writes every answer that is ready
    from the oldest on, in one write. A task per connection cost a wake-up and a loop turn
    per answer, and answers that became ready together went out in one syscall each."""

    def __init__(self, server: KafkaServer) -> None:
        self.s = server
        self.decoder = RequestDecoder(max_frame_bytes=server._max_frame)
        self.pending: deque[tuple[Request | BadRequest, Any]] = deque()  # in request order
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self._closing = False  # answer what is pending, then close
        self._closed = False  # closed or lost: nothing more is written
        self._reading_paused = False
        self._writing_paused = False
        self._waiting_on: asyncio.Future[Any] | None = None  # the oldest answer's, when awaited

    # ---- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] - uvloop's is not an asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.s._conns.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            reqs = self.decoder.feed(data)
        except FrameError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self._close_after_pending()
            return
        for req in reqs:
            if isinstance(req, BadRequest):
                log.warning("rejected request from %s (api %d v%d, correlation %d): %s%s", self.peer,
                            req.api_key, req.api_version, req.correlation_id, req.reason,
                            "" if req.reply else "; closing the connection")
                self.pending.append((req, req.reply))
                if req.reply is None:
                    self._close_after_pending()
                    return
                continue
            self.pending.append((req, self._dispatch(req)))
        self._pump()
        if len(self.pending) >= self.s._max_in_flight and not self._reading_paused and not self._closed:
            self._reading_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        self._close_after_pending()
        return True  # keep our side open until the owed answers are written

    def connection_lost(self, exc: Exception | None) -> None:
        self.s._conns.discard(self)
        self._closing = self._closed = True
        self.pending.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._pump()

    # ---- ours --------------------------------------------------------------------------------

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _close_after_pending(self) -> None:
        self._closing = True
        self._pump()

    def _dispatch(self, req: Request) -> Any:
        try:
            out = self.s._handler(req)
        except Exception:  # noqa: BLE001 - a handler bug must not take the broker down
            log.exception("handler failed on api %d v%d from %s", req.api_key, req.api_version, self.peer)
            return None
        if inspect.isawaitable(out):
            return asyncio.ensure_future(out)
        return out

    def _on_done(self, fut: asyncio.Future[Any]) -> None:
        if fut is self._waiting_on:
            self._waiting_on = None
            self._pump()

    def _pump(self) -> None:
        """Write the answers that are ready, oldest first, up to the first one still awaited."""
        if self._closed or self._waiting_on is not None:
            return
        t = self.transport
        assert t is not None
        frames: list[bytes] = []
        close = False
        pending = self.pending
        while pending and not self._writing_paused:
            req, out = pending[0]
            if isinstance(out, asyncio.Future) and not out.done():
                self._waiting_on = out
                out.add_done_callback(self._on_done)
                break
            pending.popleft()
            frame = self._answer(req, out)
            if frame is None:
                close = True
                break
            if frame:
                frames.append(frame)
                if len(frames) >= 64:  # bound what one write joins
                    t.write(b"".join(frames))
                    frames.clear()
        if frames:
            t.write(frames[0] if len(frames) == 1 else b"".join(frames))
        if close or (self._closing and not pending):
            self._closed = True
            pending.clear()
            t.close()
            return
        if self._reading_paused and len(pending) < self.s._max_in_flight // 2 and not self._closing:
            self._reading_paused = False
            t.resume_reading()

    def _answer(self, req: Request | BadRequest, out: Any) -> bytes | None:
        """The framed answer to one request; b"" for none owed (acks=0); None to close."""
        if isinstance(req, BadRequest):
            return out
        if isinstance(out, asyncio.Future):
            if out.cancelled():
                return None
            exc = out.exception()
            if exc is not None:
                log.error("handler failed on api %d v%d from %s", req.api_key, req.api_version, self.peer,
                          exc_info=exc)
                return None
            out = out.result()
        if out is NO_RESPONSE:
            return b""
        if out is None:  # handler failure: the client cannot be answered sensibly
            return None
        try:
            return encode_response(req.api_key, req.api_version, req.correlation_id, out)
        except Exception:  # noqa: BLE001 - a response we cannot encode is our bug, not a crash
            log.exception("cannot encode the response to api %d v%d for %s; closing", req.api_key,
                          req.api_version, self.peer)
            return None
