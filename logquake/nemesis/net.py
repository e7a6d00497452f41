"""Applies grudges and packet loss as iptables rules in dedicated chains on each node.

Only our own chains are ever touched: `LOGQUAKE` (partitions: DROP by source address) and
`LOGQUAKE-LOSS` (random loss with the `statistic` match), each jumped to from INPUT, and
`LOGQUAKE-OUT` (one-way cuts: DROP by destination), jumped to from OUTPUT. Dropping on input
is enough to cut TCP both ways (a SYN or its SYN-ACK never arrives); dropping on output only
silences a node towards a peer whose requests still arrive and are acted on (`reset` then
aborts that peer's connections with `ss -K`, the only thing besides iptables run). Healing deletes
the jump and the chain, nothing else. All nodes are changed in parallel, one iptables-restore
per node, so a partition lands on every node within one round of process starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from logquake.cluster.host import Host, run_checked
from logquake.nemesis.grudges import Grudge

__all__ = ["Net", "CHAIN", "LOSS_CHAIN", "OUT_CHAIN"]

CHAIN = "LOGQUAKE"
LOSS_CHAIN = "LOGQUAKE-LOSS"
OUT_CHAIN = "LOGQUAKE-OUT"
HOOK = {CHAIN: "INPUT", LOSS_CHAIN: "INPUT", OUT_CHAIN: "OUTPUT"}
T = TypeVar("T")
log = logging.getLogger(__name__)

# Removes every jump to the chain (there may be several after a crashed harness), then the chain.
_REMOVE = 'while "$1" -w -D "$3" -j "$2" 2>/dev/null; do :; done; "$1" -w -F "$2" 2>/dev/null; "$1" -w -X "$2" 2>/dev/null; true'


class Net:
    """iptables on a set of hosts; `addresses` maps node -> the address its peers see."""

    def __init__(self, hosts: Mapping[str, Host], addresses: Mapping[str, str], *, iptables: str = "iptables-nft"):
        self.hosts = dict(hosts)
        self.addresses = dict(addresses)
        self.iptables = iptables
        self._state: dict[tuple[str, str], str] = {}  # (node, chain) -> "present" | "absent"; else unknown

    def _each(self, nodes: Sequence[str], fn: Callable[[str], T]) -> dict[str, T]:
        with ThreadPoolExecutor(max(1, len(nodes))) as pool:
            return dict(zip(nodes, pool.map(fn, nodes), strict=True))

    def _restore(self, node: str, chain: str, rules: list[str]) -> None:
        # Declaring a user chain in a --noflush restore empties it, and the jump is added in the
        # same transaction, so a node is never half-partitioned. When we know the chain's state
        # (we made or removed it) this is one iptables-restore; otherwise leftovers of a crashed
        # harness are removed first.
        known = self._state.get((node, chain))
        hook = HOOK[chain]
        jump = [f"-I {hook} -j {chain}"] if known != "present" else []
        text = "\n".join(["*filter", f":{chain} - [0:0]", *rules, *jump, "COMMIT", ""])
        if known is None:
            argv = ["sh", "-c", _REMOVE + '; exec "$1"-restore -w --noflush', "sh", self.iptables, chain, hook]
            text = "\n".join(["*filter", f":{chain} - [0:0]", *rules, f"-I {hook} -j {chain}", "COMMIT", ""])
        else:
            argv = [f"{self.iptables}-restore", "-w", "--noflush"]
        self._state.pop((node, chain), None)
        run_checked(self.hosts[node], argv, input=text, timeout=30)
        self._state[(node, chain)] = "present"

    def _remove(self, node: str, chain: str) -> None:
        known = self._state.pop((node, chain), None)
        if known == "absent":
            return
        if known == "present":  # one transaction: the jump we added, then the chain
            text = f"*filter\n-D {HOOK[chain]} -j {chain}\n-F {chain}\n-X {chain}\nCOMMIT\n"
            rc, _, _ = self.hosts[node].exec([f"{self.iptables}-restore", "-w", "--noflush"], input=text, timeout=30)
            if rc == 0:
                self._state[(node, chain)] = "absent"
                return
        run_checked(self.hosts[node], ["sh", "-c", _REMOVE, "sh", self.iptables, chain, HOOK[chain]], timeout=30)
        self._state[(node, chain)] = "absent"

    def forget(self) -> None:
        """Assume nothing about the nodes' chains (e.g. after a node was rebuilt)."""
        self._state.clear()

    def drop(self, grudge: Grudge) -> None:
        """Make every node drop packets from the nodes it holds a grudge against (replacing any old one).

        Grudge entries may name non-node peers present in `addresses` (e.g. "clients").
        """

        def apply(node: str) -> None:
            peers = sorted(grudge.get(node, ()))
            if not peers:
                self._remove(node, CHAIN)
                return
            self._restore(node, CHAIN, [f"-A {CHAIN} -s {self.addresses[p]}/32 -j DROP" for p in peers])

        self._each(list(self.hosts), apply)

    def mute(self, nodes: Sequence[str], peer: str, *, pass_resets: bool = False) -> None:
        """Make `nodes` drop every packet they send to `peer` (a key of `addresses`): a one-way cut.

        `pass_resets` lets TCP resets through, so that `reset` can end the peer's connections
        while everything else stays cut.
        """
        addr = self.addresses[peer]
        rules = [f"-A {OUT_CHAIN} -d {addr}/32 -p tcp --tcp-flags RST RST -j RETURN"] if pass_resets else []
        rules.append(f"-A {OUT_CHAIN} -d {addr}/32 -j DROP")
        self._each(list(nodes), lambda n: self._restore(n, OUT_CHAIN, rules))

    def reset(self, nodes: Sequence[str], peer: str) -> dict[str, int]:
        """Abort every TCP connection of `nodes` with `peer` (`ss -K`: the kernel sends the peer a
        reset and the local process gets an error); how many each node aborted."""
        argv = ["ss", "-K", "-t", "-n", "-H", "dst", self.addresses[peer]]
        out = self._each(list(nodes), lambda n: run_checked(self.hosts[n], argv, timeout=30))
        return {n: len(text.splitlines()) for n, text in out.items()}

    def heal(self, *, thorough: bool = False) -> None:
        """Remove the partition chains (two-way and one-way) everywhere; `thorough` also removes
        what we did not add ourselves."""
        if thorough:
            self.forget()

        def remove(node: str) -> None:
            self._remove(node, CHAIN)
            self._remove(node, OUT_CHAIN)

        self._each(list(self.hosts), remove)

    def lose(self, nodes: Sequence[str], probability: float) -> None:
        """Drop each incoming packet on `nodes` with `probability` (from anywhere but loopback)."""
        rule = f"-A {LOSS_CHAIN} ! -i lo -m statistic --mode random --probability {probability:.4f} -j DROP"
        self._each(list(nodes), lambda n: self._restore(n, LOSS_CHAIN, [rule]))

    def heal_loss(self, *, thorough: bool = False) -> None:
        if thorough:
            self.forget()
        self._each(list(self.hosts), lambda n: self._remove(n, LOSS_CHAIN))

    def rules(self, node: str) -> str:
        """`iptables -S` of a node, for diagnostics and tests."""
        return run_checked(self.hosts[node], [self.iptables, "-w", "-S"], timeout=30)
