"""The recovery phase waits, bounded, for the cluster to serve again before the drain.

A broker restarted just before the final heal opens its Kafka port only once it has caught up
(tests/broker/test_catch_up.py); draining before that read nothing from it. Here the cluster's
readiness is a real listening socket that opens late.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from logquake import runner
from logquake.errors import HostError
from logquake.runner import StaticCluster, _wait_serving
from logquake.systems.base import port_open


@dataclass
class PortCluster(StaticCluster):
    """Ready when something listens on `port` of 127.0.0.1."""

    port: int = 0

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not port_open("127.0.0.1", self.port, timeout=0.2):
            if time.monotonic() >= deadline:
                raise HostError("n1", "wait_ready", -1, f"nothing on port {self.port}")
            time.sleep(0.02)


@contextlib.contextmanager
def _listening_after(delay: float) -> Iterator[int]:
    """A port on 127.0.0.1, bound now, listening only `delay` s from now."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    timer = threading.Timer(delay, s.listen)
    timer.start()
    try:
        yield s.getsockname()[1]
    finally:
        timer.cancel()
        s.close()


def test_the_drain_waits_until_a_late_node_serves() -> None:
    t0 = time.monotonic()  # before the timer starts: 1.5 s at least, however late this thread runs
    with _listening_after(1.5) as port:
        _wait_serving(PortCluster("", port=port), threading.Event())
        assert 1.4 < time.monotonic() - t0 < 10
        assert port_open("127.0.0.1", port)


def test_the_wait_is_bounded_and_says_so(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(runner, "SERVING_AFTER_HEAL_S", 1.0)
    with _listening_after(60) as port, caplog.at_level(logging.WARNING, logger="logquake.runner"):
        t0 = time.monotonic()
        _wait_serving(PortCluster("", port=port), threading.Event())
        assert time.monotonic() - t0 < 5
    assert "not serving again" in caplog.text and f"port {port}" in caplog.text


def test_ctrl_c_ends_the_wait() -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    with _listening_after(60) as port:
        t0 = time.monotonic()
        _wait_serving(PortCluster("", port=port), stop)
        assert time.monotonic() - t0 < 5
