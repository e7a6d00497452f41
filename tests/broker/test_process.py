"""The broker process itself: config errors, hostile bytes on the Kafka port, SIGTERM."""

from __future__ import annotations

import random
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kafka.protocol.metadata import ApiVersionsResponse

from logquake.broker import LocalCluster
from logquake.broker.apis import APIS, version_entries
from logquake.broker.nodeconfig import parse_node_config
from logquake.errors import ConfigError

NODES = [{"node_id": i, "host": "127.0.0.1", "kafka_port": 19000 + i, "raft_port": 19100 + i} for i in (1, 2, 3)]


def _cfg(**kw):
    base = {"node_id": 1, "data_dir": "/tmp/d", "log_file": "/tmp/l.log", "nodes": NODES}
    return {**base, **kw}


@pytest.mark.parametrize(("raw", "key"), [
    (_cfg(fsync="sometimes"), "fsync"),
    (_cfg(node_id=9), "node_id"),
    (_cfg(data_dir="rel/path"), "data_dir"),
    (_cfg(unsafe={"dedup": "maybe"}), "unsafe.dedup"),
    (_cfg(unsafe={"bogus": 1}), "unsafe.bogus"),
    (_cfg(nodes=[{"node_id": 1, "host": "h", "kafka_port": 0, "raft_port": 2}]), "nodes[0].kafka_port"),
    (_cfg(colour="blue"), "colour"),
    (_cfg(idle_heartbeat_ticks=1), "idle_heartbeat_ticks"),  # under heartbeat_ticks (2)
    (_cfg(idle_heartbeat_ticks=30), "idle_heartbeat_ticks"),  # not under election_ticks (30)
    (_cfg(idle_heartbeat_ticks="x"), "idle_heartbeat_ticks"),
])
def test_bad_node_config_names_the_key(raw, key) -> None:
    with pytest.raises(ConfigError) as e:
        parse_node_config(raw)
    assert e.value.key == key


def test_a_nested_key_keeps_the_message_and_hint_of_its_error() -> None:
    with pytest.raises(ConfigError) as e:
        parse_node_config(_cfg(nodes=[{"node_id": 1, "host": "h", "kafka_port": 0, "raft_port": 2}]))
    assert str(e.value) == "nodes[0].kafka_port: must be an integer in [1, 65535], got 0"
    nested = ConfigError("fsync", "must be one of always, never", hint="see README").under("broker")
    assert (nested.key, nested.message, nested.hint) == ("broker.fsync", "must be one of always, never", "see README")
    assert str(nested) == "broker.fsync: must be one of always, never"


def test_node_config_defaults_and_unsafe_off() -> None:
    cfg = parse_node_config(_cfg(unsafe={"dedup": False, "fsync": "never"}))
    assert cfg.fsync == "always" and cfg.effective_fsync == "never" and cfg.unsafe["dedup"] == "off"
    assert cfg.me.kafka_port == 19001
    assert (cfg.heartbeat_ticks, cfg.idle_heartbeat_ticks, cfg.election_ticks) == (2, 10, 30)
    # A shorter election timeout gets a third of it, never under heartbeat_ticks.
    assert parse_node_config(_cfg(election_ticks=12)).idle_heartbeat_ticks == 4
    assert parse_node_config(_cfg(election_ticks=4)).idle_heartbeat_ticks == 2


def test_cli_bad_config_exits_nonzero_with_message(tmp_path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(_cfg(fsync="sometimes")))
    r = subprocess.run([sys.executable, "-m", "logquake", "broker", "--node-id", "1", "--config", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "fsync" in r.stderr and "Traceback" not in r.stderr


def _roundtrip(host: str, port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(payload)
        try:
            (n,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        except (struct.error, ConnectionError):
            return b""
        return s.recv(n, socket.MSG_WAITALL)


def test_hostile_bytes_never_kill_the_broker(tmp_path) -> None:
    """Truncated, oversized, malformed and unknown requests: answered or closed; broker lives."""
    with LocalCluster(n=1, base_dir=tmp_path, broker_overrides={"max_frame_bytes": 65536}) as c:
        c.wait_ready(timeout=60)
        host, port = c.address(1)
        # Too-new ApiVersions: a v0 error response listing our ranges.
        body = struct.pack(">hhih", 18, 9, 1234, 1) + b"x" + b"\x00" * 5
        resp = ApiVersionsResponse.decode(_roundtrip(host, port, struct.pack(">i", len(body)) + body),
                                          version=0, header=True)
        assert resp.error_code == 35 and resp.header.correlation_id == 1234
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges == {k: (lo, hi) for k, lo, hi in version_entries()}
        rng = random.Random(7)
        hostile = [
            struct.pack(">i", 1 << 30),  # oversized
            struct.pack(">i", -1),  # negative size
            struct.pack(">i", 100) + b"\x00\x03\x00\x09",  # truncated, then the peer closes
            struct.pack(">i", 12) + struct.pack(">hhi", 3, 9, 5) + b"\xff\xff",  # malformed Metadata
            struct.pack(">i", 10) + struct.pack(">hhih", 4, 0, 5, -1),  # unsupported API (LeaderAndIsr)
        ]
        for _ in range(200):
            key = rng.choice(sorted(APIS))
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60)))
            frame = struct.pack(">hhi", key, rng.randrange(0, 14), rng.randrange(1 << 30)) + junk
            hostile.append(struct.pack(">i", len(frame)) + frame)
        for payload in hostile:
            try:
                _roundtrip(host, port, payload, timeout=2.0)
            except (TimeoutError, OSError):
                pass
        assert c.is_up(1)
        assert c.metadata(1).brokers[0].node_id == 1
        assert "rejected request" in c.log_path(1).read_text()


def test_sigterm_stops_cleanly(tmp_path) -> None:
    """SIGTERM: the node finishes its loop, closes its logs and exits 0 by itself."""
    with LocalCluster(n=1, base_dir=tmp_path) as c:
        c.wait_ready(timeout=60)
        code = c.stop(1, timeout=30)  # still running after the timeout: SIGKILL, and a negative code
        assert code == 0, f"the broker did not exit by itself after SIGTERM (exit code {code})"
        log = c.log_path(1).read_text()
        assert "received SIGTERM" in log and "node 1 stopped" in log
        assert "did not finish" not in log, "the ready loop was cut off instead of finishing its turn"


def test_broker_runs_on_glibc_malloc_in_the_same_process(tmp_path, monkeypatch) -> None:
    """The broker re-execs itself with PYTHONMALLOC=malloc (pymalloc's arenas kept a restarted
    broker's replay garbage resident: process._use_system_malloc), keeping its pid, and serves."""
    monkeypatch.delenv("PYTHONMALLOC", raising=False)
    with LocalCluster(n=1, base_dir=tmp_path) as c:
        c.wait_ready(timeout=60)
        pid = c.procs[1].pid  # the pid LocalCluster spawned: exec keeps it
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"PYTHONMALLOC=malloc" in environ
        assert c.stop(1, timeout=30) == 0
