"""Peer transport: one TCP connection per node pair, carrying every Raft group's messages.

The node with the lower id dials, the other accepts; the dialer's first frame names it. All
messages queued for a peer during one event-loop turn go out as one frame, so the
heartbeats of all groups between two nodes travel together. Delivery is best effort: while
a peer is unreachable or not reading (paused), its messages are dropped, which Raft
tolerates by retrying; nothing here blocks the node.

Frame: u32 length, then records of (u32 group, u32 length, bytes). The first frame on a
dialled connection is the 8-byte hello b"LQRAFT" + u16 node id.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable

__all__ = ["PeerTransport"]

log = logging.getLogger("logquake.broker.transport")

_HELLO = b"LQRAFT"
_REC = struct.Struct(">II")
MAX_FRAME = 256 * 1024 * 1024
MAX_BUFFERED = 64 * 1024 * 1024  # beyond this a peer is not keeping up: drop, Raft resends

# on_message(from_node, group_id, payload)
OnMessage = Callable[[int, int, bytes], None]


class PeerTransport:
    """Sends and receives opaque per-group payloads to/from the other nodes."""

    def __init__(self, *, node_id: int, host: str, port: int, peers: dict[int, tuple[str, int]],
                 on_message: OnMessage) -> None:
        self.node_id = node_id
        self._host, self._port = host, port
        self._peers = peers
        self._on_message = on_message
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._queued: dict[int, list[bytes]] = {}
        self._flush_scheduled = False
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self.dropped: set[int] = set()  # test hook: peers whose traffic is dropped both ways
        self.frames_sent = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._port, reuse_address=True,
                                                  limit=1 << 20)
        for peer in self._peers:
            if peer > self.node_id:
                self._spawn(self._dial_forever(peer))

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for w in self._writers.values():
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def send(self, peer: int, group: int, payload: bytes | list[bytes]) -> None:
        """Queue a payload (or its parts, sent without joining them) for `peer`; flushed with
        everything else queued in this loop turn."""
        if peer in self.dropped or peer not in self._writers:
            return
        q = self._queued.setdefault(peer, [])
        if isinstance(payload, list):
            q.append(_REC.pack(group, sum(len(p) for p in payload)))
            q.extend(payload)
        else:
            q.append(_REC.pack(group, len(payload)))
            q.append(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, {}
        for peer, parts in queued.items():
            w = self._writers.get(peer)
            if w is None or w.is_closing():
                continue
            if w.transport.get_write_buffer_size() > MAX_BUFFERED:
                continue
            # One writelines: the length prefix written alone would be a syscall (and a
            # packet) of its own.
            parts.insert(0, struct.pack(">I", sum(len(p) for p in parts)))
            w.writelines(parts)
            self.frames_sent += 1

    def connected(self) -> set[int]:
        return {p for p, w in self._writers.items() if not w.is_closing()}

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        t = asyncio.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _dial_forever(self, peer: int) -> None:
        host, port = self._peers[peer]
        delay = 0.05
        while not self._closing:
            try:
                reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
            except OSError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            delay = 0.05
            writer.write(struct.pack(">I", 8) + _HELLO + struct.pack(">H", self.node_id))
            await self._serve(peer, reader, writer)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            (n,) = struct.unpack(">I", await reader.readexactly(4))
            hello = await reader.readexactly(n) if n == 8 else b""
            if not hello.startswith(_HELLO):
                log.warning("peer connection without a valid hello from %s; closing",
                            writer.get_extra_info("peername"))
                writer.close()
                return
            (peer,) = struct.unpack(">H", hello[6:8])
            if peer not in self._peers:
                log.warning("peer connection from unknown node %d; closing", peer)
                writer.close()
                return
            await self._serve(peer, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, peer: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        old = self._writers.get(peer)
        if old is not None and old is not writer:
            old.close()
        self._writers[peer] = writer
        log.info("peer %d connected", peer)
        try:
            while True:
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                if n > MAX_FRAME:
                    log.warning("peer %d sent a %d-byte frame; reconnecting", peer, n)
                    return
                self._dispatch(peer, await reader.readexactly(n))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            if self._writers.get(peer) is writer:
                del self._writers[peer]
                log.info("peer %d disconnected", peer)
            writer.close()

    def _dispatch(self, peer: int, body: bytes) -> None:
        if peer in self.dropped:
            return
        pos, n = 0, len(body)
        view = memoryview(body)
        while pos + 8 <= n:
            group, ln = _REC.unpack_from(body, pos)
            pos += 8
            self._on_message(peer, group, bytes(view[pos : pos + ln]))
            pos += ln
