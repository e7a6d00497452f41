"""partition:replies vs partition:replies-reset on a real lab, with a real TCP echo server on a node.

`replies` holds the node's answers back (its requests still arrive); after a window shorter than
a client's request timeout, TCP delivers the held-back answer and the client never notices.
`replies-reset` ends the window by aborting the connection: the client gets a reset at once and
never the answer to a request the server did receive, which is what makes a producer retry it.
"""

from __future__ import annotations

import random
import socket
import struct
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cluster.labkit import fake_cluster, wait_until

from logquake.nemesis import CLIENTS, OUT_CHAIN, Net, PartitionFault
from logquake.systems.base import port_open

pytestmark = pytest.mark.lab

PORT = 7001
ECHO = textwrap.dedent("""
    import socket, sys, threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
    log = open(sys.argv[3], "ab", buffering=0)
    def serve(c):
        try:
            while data := c.recv(4096):
                log.write(data); c.sendall(data)
        except OSError:
            pass
    while True:
        threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
""")


TCP_ESTABLISHED, TCP_CLOSE = 1, 7  # Linux's tcp_states.h


def _tcp_info(sock: socket.socket) -> tuple[int, int]:
    """(state, total retransmissions) of a TCP socket, from Linux's struct tcp_info."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return info[0], struct.unpack_from("I", info, 100)[0]


def _echo_on(c, node: str, base: Path) -> Path:
    """An echo server on `node` that logs every byte it receives; the log's path."""
    script, log = base / "echo.py", base / f"{node}.received"
    script.write_text(ECHO)
    c.hosts[node].spawn([sys.executable, str(script), c.addresses[node], str(PORT), str(log)],
                        pidfile=str(base / f"{node}.echo.pid"), logfile=str(base / f"{node}.echo.log"))
    wait_until(lambda: port_open(c.addresses[node], PORT), what=f"echo server on {node}")
    return log


def _send_unanswered(c, fault: PartitionFault, variant: str, log: Path, msg: bytes) -> socket.socket:
    """Connect to n1's echo server, cut its replies, send `msg`: it arrives, no answer comes back."""
    sock = socket.create_connection((c.addresses["n1"], PORT), timeout=5)
    assert fault.start(variant) == f"{variant}: n1,n2 drop everything to the clients"
    sock.sendall(msg)
    wait_until(lambda: log.exists() and msg in log.read_bytes(), what="the request to arrive")
    sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        sock.recv(100)
    return sock


def test_replies_alone_delivers_the_held_back_answer_after_the_heal(tmp_path):
    with fake_cluster(2, tmp_path / "c") as c:
        log = _echo_on(c, "n1", tmp_path)
        net = Net(c.hosts, {**c.addresses, CLIENTS: c.harness_address}, iptables=c.iptables)
        fault = PartitionFault(c, net, random.Random(0))
        sock = _send_unanswered(c, fault, "replies", log, b"ping")
        assert fault.stop() == "network healed"
        sock.settimeout(10)  # TCP retransmits the answer: the client just sees a slow reply
        assert sock.recv(100) == b"ping"
        sock.close()


def test_replies_reset_aborts_the_clients_connections_with_the_answer_unsent(tmp_path):
    with fake_cluster(2, tmp_path / "c") as c:
        log = _echo_on(c, "n1", tmp_path)
        net = Net(c.hosts, {**c.addresses, CLIENTS: c.harness_address}, iptables=c.iptables)
        fault = PartitionFault(c, net, random.Random(0))
        sock = _send_unanswered(c, fault, "replies-reset", log, b"ping")
        assert "-p tcp -m tcp --tcp-flags RST RST -j RETURN" in net.rules("n1")
        # Long enough that the client's own retransmissions back off for seconds: had the abort
        # sent nothing, the next retransmission would reach the healed server, whose reset
        # would end the connection too, but only after it.
        time.sleep(3)
        state, retransmitted = _tcp_info(sock)
        assert state == TCP_ESTABLISHED
        assert fault.stop() == "aborted 1 client connections, network healed"
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(100)  # never b"ping": the server got the request, the client no answer
        # Closed by the abort's reset: not one more retransmission of the request went out.
        assert _tcp_info(sock) == (TCP_CLOSE, retransmitted)
        assert all(OUT_CHAIN not in net.rules(n) for n in c.nodes)
        with socket.create_connection((c.addresses["n1"], PORT), timeout=5) as again:
            again.sendall(b"pong")
            assert again.recv(100) == b"pong"
        fault.start("replies-reset")
        fault.heal()  # the thorough heal also removes it, and leaves no reset pending
        assert not fault.reset_on_stop and all(OUT_CHAIN not in net.rules(n) for n in c.nodes)
