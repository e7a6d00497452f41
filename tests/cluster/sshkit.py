"""Real sshd daemons inside lab node namespaces, for the ssh backend's tests."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from logquake.systems.base import port_open

from .labkit import lab, wait_until

SSHD = "/usr/sbin/sshd"


@dataclass
class SshLab:
    addresses: dict[str, str]
    key: str  # private key the harness logs in with (as root)
    known_hosts: str  # every node's host key, by address
    host_keys: dict[str, str]  # node -> "type base64"
    hosts: dict  # the lab hosts, for checks from inside


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


@contextlib.contextmanager
def ssh_lab(n: int, base: Path) -> Iterator[SshLab]:
    if not Path(SSHD).exists():
        pytest.skip("needs sshd (Debian openssh-server)")
    base = base.resolve()
    keys = base / "keys"
    keys.mkdir(parents=True)
    client_pub = _keygen(keys / "client")
    (keys / "authorized_keys").write_text(client_pub + "\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    with lab(n, base / "lab") as (state, hosts):
        host_keys, known = {}, []
        for node, host in hosts.items():
            addr = state.addresses[node]
            host_keys[node] = _keygen(keys / f"host_{node}")
            known.append(f"{addr} {host_keys[node]}")
            conf = keys / f"sshd_{node}.conf"
            conf.write_text("\n".join([
                f"ListenAddress {addr}", "Port 22", f"HostKey {keys / f'host_{node}'}",
                f"PidFile {keys / f'sshd_{node}.pid'}", f"AuthorizedKeysFile {keys / 'authorized_keys'}",
                "StrictModes no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no", "MaxStartups 100:30:200", "MaxSessions 100", "",
            ]))
            host.spawn([SSHD, "-D", "-e", "-f", str(conf)], pidfile=str(keys / f"daemon_{node}.pid"),
                       logfile=str(keys / f"sshd_{node}.log"))
        (keys / "known_hosts").write_text("\n".join(known) + "\n")
        for node in hosts:
            wait_until(lambda a=state.addresses[node]: port_open(a, 22), what=f"sshd on {node}")
        yield SshLab(addresses=dict(state.addresses), key=str(keys / "client"),
                     known_hosts=str(keys / "known_hosts"), host_keys=host_keys, hosts=hosts)
