"""The `ssh` backend: real machines reached with paramiko, as Jepsen's control node does.

Host keys are checked against known_hosts; only `accept_new_host_keys` lets an unknown key in
(it is then saved, like OpenSSH's StrictHostKeyChecking=accept-new). A key that changed is
always refused. With `sudo`, every command runs under `sudo -n`, so files are moved through
`cat` rather than SFTP (which would write as the login user).
"""

from __future__ import annotations

import os
import selectors
import shlex
import threading
import time
from collections.abc import Mapping, Sequence

import paramiko

from logquake.cluster.host import (
    ExecResult,
    shell_join,
    signal_by_kill,
    spawn_by_shell,
)
from logquake.cluster.hostcfg import HostEntry
from logquake.errors import ConfigError, HostError, MissingPrerequisite

__all__ = ["SshHost"]


class SshHost:
    """One node over one SSH connection (channels are opened per command, from any thread)."""

    def __init__(self, entry: HostEntry, *, connect_timeout: float = 30.0) -> None:
        self.name = entry.name
        self.entry = entry
        self._timeout = connect_timeout
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None

    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
                return self._client
            e = self.entry
            client = paramiko.SSHClient()
            known = os.path.expanduser(e.known_hosts)
            if os.path.exists(known):
                try:
                    client.load_host_keys(known)
                except (paramiko.hostkeys.InvalidHostKey, paramiko.SSHException) as x:
                    raise ConfigError(f"hosts.{self.name}.known_hosts", f"{known} is not a known_hosts file: {x}") from None
            if e.accept_new_host_keys:
                os.makedirs(os.path.dirname(known) or ".", exist_ok=True)
                client.set_missing_host_key_policy(_AcceptNew(known))
            else:
                client.set_missing_host_key_policy(paramiko.RejectPolicy())
            try:
                client.connect(e.address, port=e.port, username=e.user, key_filename=e.key,
                               timeout=self._timeout, banner_timeout=self._timeout, auth_timeout=self._timeout,
                               allow_agent=e.key is None, look_for_keys=e.key is None)
            except paramiko.BadHostKeyException as x:
                client.close()  # its transport (a socket, a thread) may be up
                raise MissingPrerequisite(f"{self.name}: host key of {e.address} changed: {x}",
                                          hint=f"check the machine, then fix {known}") from None
            except paramiko.SSHException as x:
                client.close()  # its transport (a socket, a thread) may be up
                hint = (f"add its key to {known} (ssh-keyscan) or set accept_new_host_keys: true"
                        if "not found in known_hosts" in str(x) else "check address, user and key")
                raise MissingPrerequisite(f"{self.name}: ssh to {e.user}@{e.address}:{e.port} failed: {x}",
                                          hint=hint) from None
            except OSError as x:
                client.close()  # its transport (a socket, a thread) may be up
                raise MissingPrerequisite(f"{self.name}: cannot reach {e.address}:{e.port}: {x}") from None
            self._client = client
            return client

    def _command(self, argv: Sequence[str]) -> str:
        cmd = shell_join(argv)
        return f"sudo -n -- sh -c {shlex.quote(cmd)}" if self.entry.sudo else cmd

    def _run(self, command: str, *, timeout: float, stdin: bytes | None) -> tuple[int, bytes, bytes]:
        chan = self._connect().get_transport().open_session(timeout=self._timeout)
        try:
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            return _collect(chan, timeout)
        finally:
            chan.close()

    def exec(self, argv: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> ExecResult:
        rc, out, err = self._run(self._command(argv), timeout=timeout,
                                 stdin=input.encode() if input is not None else None)
        return ExecResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def put(self, local: str, remote: str) -> None:
        with open(local, "rb") as f:
            data = f.read()
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1.lq-tmp" && mv -f "$1.lq-tmp" "$1"'
        argv = ["sh", "-c", script, "sh", remote]
        rc, _, err = self._run(self._command(argv), timeout=120, stdin=data)
        if rc != 0:
            raise HostError(self.name, f"put {remote}", rc, err.decode(errors="replace"))

    def get(self, remote: str, local: str) -> None:
        rc, out, err = self._run(self._command(["cat", remote]), timeout=120, stdin=None)
        if rc != 0:
            raise FileNotFoundError(f"{self.name}:{remote}: {err.decode(errors='replace').strip()}")
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        with open(local, "wb") as f:
            f.write(out)

    def spawn(self, argv: Sequence[str], *, pidfile: str, logfile: str, env: Mapping[str, str] = {}) -> int:
        return spawn_by_shell(self, argv, pidfile=pidfile, logfile=logfile, env=env)

    def signal(self, pid: int, sig: int) -> None:
        signal_by_kill(self, pid, sig)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _collect(chan: paramiko.Channel, timeout: float) -> tuple[int, bytes, bytes]:
    """Read stdout and stderr as they come (neither can fill up and stall the other).

    Waits with a selector (epoll here), not select(): a process holding more than 1024 files
    gets a channel fd select() refuses ("filedescriptor out of range")."""
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as waiter:
        waiter.register(chan, selectors.EVENT_READ)
        while True:
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return 124, bytes(out), bytes(err) + f"\ntimed out after {timeout}s".encode()
            waiter.select(min(left, 0.5))
    return chan.recv_exit_status(), bytes(out), bytes(err)


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Trust a host seen for the first time and remember its key (never a changed one)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        with open(self.path, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
