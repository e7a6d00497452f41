"""The ssh backend through paramiko against real sshd daemons in lab node namespaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from logquake.cluster.conformance import check_host
from logquake.cluster.hostcfg import HostEntry, parse_hosts
from logquake.cluster.ssh import SshHost
from logquake.errors import ConfigError, MissingPrerequisite

from .sshkit import ssh_lab

pytestmark = pytest.mark.lab


def _entry(lab, node: str, **kw) -> HostEntry:
    values = {"name": node, "address": lab.addresses[node], "user": "root", "key": lab.key,
              "known_hosts": lab.known_hosts, **kw}
    return parse_hosts(({**values, "type": "ssh"},), "ssh")[0]


def _sockets() -> int:
    """How many sockets this process holds open."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def test_ssh_host_meets_the_host_contract_and_checks_host_keys(tmp_path):
    with ssh_lab(1, tmp_path) as lab:
        host = SshHost(_entry(lab, "n1"))
        try:
            check_host(host, str(tmp_path / "work"))
            # the command really ran in the node's namespace: it sees the node's address
            assert lab.addresses["n1"] in host.exec(["ip", "-4", "-o", "addr"]).out
        finally:
            host.close()
        sockets = _sockets()
        # an unknown host key is refused by default...
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        with pytest.raises(MissingPrerequisite, match="known_hosts"):
            SshHost(_entry(lab, "n1", known_hosts=str(empty))).exec(["true"])
        assert _sockets() == sockets  # a refused connection is closed, not left to the server
        # ...accepted (and remembered) only when asked to
        fresh = tmp_path / "fresh" / "known_hosts"
        h = SshHost(_entry(lab, "n1", known_hosts=str(fresh), accept_new_host_keys=True))
        assert h.exec(["echo", "hi"]).out == "hi\n"
        h.close()
        assert lab.host_keys["n1"].split()[1] in fresh.read_text()
        # a key that changed is refused even then
        wrong = tmp_path / "wrong_known_hosts"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
        other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
        wrong.write_text(f"{lab.addresses['n1']} {other}\n")
        with pytest.raises(MissingPrerequisite, match="changed"):
            SshHost(_entry(lab, "n1", known_hosts=str(wrong), accept_new_host_keys=True)).exec(["true"])
        assert _sockets() == sockets


def test_a_command_runs_in_a_process_holding_more_than_1024_files(tmp_path):
    # select() refuses an fd above 1024, which the suite's own process reached once: the
    # channel is waited on with a selector.
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with ssh_lab(1, tmp_path) as lab:
            host = SshHost(_entry(lab, "n1"))
            try:
                assert tuple(host.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])) == (3, "out\n", "err\n")
            finally:
                host.close()
    finally:
        for fd in held:
            os.close(fd)


def test_host_entries_are_checked():
    with pytest.raises(ConfigError, match=r"hosts\[0\].address"):
        parse_hosts(({"user": "x"},), "ssh")
    with pytest.raises(ConfigError, match="unknown keys"):
        parse_hosts(({"address": "a", "passwrd": "x"},), "ssh")
    with pytest.raises(ConfigError, match="unique"):
        parse_hosts(({"address": "a", "name": "n"}, {"address": "b", "name": "n"}), "ssh")


@pytest.mark.slow
def test_short_ssh_run_with_partitions_and_kills(tmp_path):
    """`logquake run --backend ssh`: upload, brokers, faults, all through paramiko."""
    import yaml

    with ssh_lab(3, tmp_path) as lab:
        remote = tmp_path / "remote"
        hosts = [{"name": n, "address": lab.addresses[n], "user": "root", "key": lab.key,
                  "known_hosts": lab.known_hosts, "python": sys.executable, "dir": str(remote)}
                 for n in ("n1", "n2", "n3")]
        config = tmp_path / "ssh.yaml"
        config.write_text(yaml.safe_dump({
            "backend": "ssh", "nodes": 3, "hosts": hosts, "nemesis": ["partition", "kill"],
            "nemesis_interval": 2, "time_limit": 12, "rate": 40, "concurrency": 3, "seed": 3,
            "recovery_time": 3, "results_dir": str(tmp_path / "results"),
        }))
        p = subprocess.run([sys.executable, "-m", "logquake", "run", "-c", str(config)], capture_output=True,
                           text=True, timeout=400, check=False)
        out = p.stdout + p.stderr
        run_dir = (tmp_path / "results" / "latest").resolve()
        assert (run_dir / "results.json").is_file(), out[-3000:]
        res = json.loads((run_dir / "results.json").read_text())
        ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
        faults = [o["value"] for o in ops if o.get("process") == "nemesis" and o["f"].startswith("start-")]
        assert faults, out[-2000:]
        assert sum(o.get("type") == "ok" for o in ops) > 50, out[-2000:]
        assert res.get("valid") is True, f"{json.dumps(res)[:2000]}\n{out[-2000:]}"
        # the brokers ran the uploaded copy of logquake, and their logs came back
        assert (remote / "pkg" / "logquake" / "broker" / "__main__.py").is_file()
        assert (run_dir / "nodes" / "n1" / "broker.log").is_file() or any((run_dir / "nodes").rglob("broker.log"))
        # teardown stopped them: no broker left on any node
        for n in ("n1", "n2", "n3"):
            pid = (remote / n / "broker.pid").read_text().strip()
            assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]
