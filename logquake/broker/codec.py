"""Kafka wire codec: frames in, decoded requests out; responses in, frames out.

Sans-I/O and `KafkaProtocol`-shaped (kafka-python's parser, mirrored for the server side):
`RequestDecoder.feed(bytes)` returns whole requests, `encode_response(...)` returns bytes.
The message classes are kafka-python's JSON-schema `ApiMessage`s (exact pin in pyproject),
so flexible versions, tagged fields and header versions come from the upstream schemas;
which APIs and versions are decoded is apis.py's table.

A malformed frame is the peer's fault: the decoder raises `FrameError` for what makes the
stream unusable (bad length: the connection must close) and returns a `BadRequest` for a
frame whose body cannot be decoded (the server answers or closes, but keeps running).
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse

from logquake.broker.apis import APIS, ApiKey, version_entries
from logquake.broker.kerrors import ErrorCode

__all__ = [
    "BadRequest",
    "Encoded",
    "FrameError",
    "Request",
    "RequestDecoder",
    "api_versions_error_response",
    "encode_response",
]

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
_HDR = struct.Struct(">hhi")


class FrameError(Exception):
    """The byte stream cannot be framed any more (bad size): close the connection."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """One decoded request: header fields plus the kafka-python body object."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int


@dataclass(frozen=True, kw_only=True)
class BadRequest:
    """A complete frame that could not be served; `reply` is a framed answer or None (close)."""

    api_key: int
    api_version: int
    correlation_id: int
    reason: str
    reply: bytes | None


class RequestDecoder:
    """Turns a TCP byte stream into `Request`s and `BadRequest`s, in arrival order.

    Received chunks are kept as zero-copy views and joined once per complete frame, so a
    large produce request costs one copy here however many reads it arrived in."""

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._chunks: deque[memoryview] = deque()
        self._have = 0
        self._need: int | None = None  # size of the frame being received, once its prefix is in
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[Request | BadRequest]:
        """Add received bytes; return every request completed by them."""
        if data:
            self._chunks.append(memoryview(data))
            self._have += len(data)
        out: list[Request | BadRequest] = []
        while True:
            if self._need is None:
                if self._have < 4:
                    break
                (size,) = struct.unpack(">i", self._take(4))
                if size < 8 or size > self._max:
                    raise FrameError(f"frame size {size} outside [8, {self._max}]")
                self._need = size
            if self._have < self._need:
                break
            frame = self._take(self._need)
            self._need = None
            out.append(decode_request(frame))
        return out

    def _take(self, n: int) -> bytes:
        """The next n buffered bytes (n <= self._have), copied once."""
        chunks = self._chunks
        self._have -= n
        first = chunks[0]
        if len(first) >= n:
            if len(first) == n:
                chunks.popleft()
            else:
                chunks[0] = first[n:]
            return first[:n].tobytes()
        parts = []
        while n:
            c = chunks[0]
            if len(c) <= n:
                parts.append(chunks.popleft())
                n -= len(c)
            else:
                parts.append(c[:n])
                chunks[0] = c[n:]
                n = 0
        return b"".join(parts)

    @property
    def buffered(self) -> int:
        return self._have


def decode_request(frame: bytes) -> Request | BadRequest:
    """Decode one unframed request; never raises for bad content."""
    api_key, version, corr = _HDR.unpack_from(frame, 0)
    api = APIS.get(api_key)
    if api is None:
        return BadRequest(api_key=api_key, api_version=version, correlation_id=corr,
                          reason=f"unsupported api key {api_key}", reply=None)
    lo, hi, req_cls = api.min_version, api.max_version, api.request
    if not lo <= version <= hi:
        reply = api_versions_error_response(corr) if api_key == ApiKey.API_VERSIONS else None
        return BadRequest(api_key=api_key, api_version=version, correlation_id=corr,
                          reason=f"unsupported version {version} of api {api_key} (supported {lo}-{hi})",
                          reply=reply)
    try:
        client_id, pos = _parse_header_tail(frame, req_cls.flexible_version_q(version))
        # The body alone, from a view: kafka-python's own header path copies the whole frame.
        body = req_cls.decode(memoryview(frame)[pos:], version=version)
    except Exception as e:  # noqa: BLE001 - any decode failure is the peer's malformed frame
        return BadRequest(api_key=api_key, api_version=version, correlation_id=corr,
                          reason=f"malformed {req_cls.__name__} v{version}: {type(e).__name__}: {e}",
                          reply=None)
    return Request(api_key=api_key, api_version=version, correlation_id=corr,
                   client_id=client_id, body=body, size=len(frame))


def _parse_header_tail(frame: bytes, flexible: bool) -> tuple[str | None, int]:
    """Client id and body position of a request header (v1; v2 adds tagged fields)."""
    n = len(frame)
    (ln,) = struct.unpack_from(">h", frame, 8)
    pos = 10
    client_id = None
    if ln >= 0:
        if pos + ln > n:
            raise ValueError("client id runs past the frame")
        client_id = frame[pos : pos + ln].decode("utf-8", "replace")
        pos += ln
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
        if pos > n:
            raise ValueError("tagged header fields run past the frame")
    return client_id, pos


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError("bad unsigned varint in the request header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


@dataclass(frozen=True, slots=True)
class Encoded:
    """A response body already in wire form (responses.py's encoders): only the header is added.
    `flexible`: the response header carries tagged fields (v1), as for a flexible version."""

    body: bytes
    flexible: bool


_CORR = struct.Struct(">ii")


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """Frame a response object (a kafka-python response instance, a dict of its fields, or an
    `Encoded` body)."""
    if type(body) is Encoded:
        tags = b"\x00" if body.flexible else b""
        return _CORR.pack(4 + len(tags) + len(body.body), correlation_id) + tags + body.body
    resp_cls = APIS[api_key].response
    if isinstance(body, dict):
        body = resp_cls[version](**body)
    elif body.API_VERSION != version:
        body.API_VERSION = version
    # The version must be set before the header: kafka-python's setter assumes a request header.
    body.with_header(correlation_id=correlation_id)
    return bytes(body.encode(header=True, framed=True))


def api_versions_error_response(correlation_id: int) -> bytes:
    """The v0 UNSUPPORTED_VERSION answer that lets a too-new client fall back (KIP-511)."""
    cls = ApiVersionsResponse[0]
    body = cls(error_code=ErrorCode.UNSUPPORTED_VERSION,
               api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                         for k, lo, hi in version_entries()])
    body.with_header(correlation_id=correlation_id)
    return bytes(body.encode(header=True, framed=True))
