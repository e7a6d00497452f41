"""Applies grudges and packet loss as iptables rules in dedicated chains on each node.

Only our own chains are ever touched: `LOGQUAKE` (partitions: DROP by source address) and
`LOGQUAKE-LOSS` (random loss with the `statistic` match), each jumped to from INPUT. Dropping
on input is enough to cut TCP both ways (a SYN or its SYN-ACK never arrives). Healing deletes
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

__all__ = ["Net", "CHAIN", "LOSS_CHAIN"]

CHAIN = "LOGQUAKE"
LOSS_CHAIN = "LOGQUAKE-LOSS"
T = TypeVar("T")
log = logging.getLogger(__name__)

# Removes every jump to the chain (there may be several after a crashed harness), then the chain.
_REMOVE = 'while "$1" -w -D INPUT -j "$2" 2>/dev/null; do :; done; "$1" -w -F "$2" 2>/dev/null; "$1" -w -X "$2" 2>/dev/null; true'


class Net:
    """iptables on a set of hosts; `addresses` maps node -> the address its peers see."""

    def __init__(self, hosts: Mapping[str, Host], addresses: Mapping[str, str], *, iptables: str = "iptables-nft"):
        self.hosts = dict(hosts)
        self.addresses = dict(addresses)
        self.iptables = iptables

    def _each(self, nodes: Sequence[str], fn: Callable[[str], T]) -> dict[str, T]:
        with ThreadPoolExecutor(max(1, len(nodes))) as pool:
            return dict(zip(nodes, pool.map(fn, nodes), strict=True))

    def _restore(self, node: str, chain: str, rules: list[str]) -> None:
        # Declaring a user chain in a --noflush restore empties it; the jump is added in the same
        # transaction, so a node is never half-partitioned.
        # One process round per node: remove the old chain, then restore the new one from stdin.
        text = "\n".join(["*filter", f":{chain} - [0:0]", *rules, f"-I INPUT -j {chain}", "COMMIT", ""])
        script = _REMOVE + '; exec "$1"-restore -w --noflush'
        run_checked(self.hosts[node], ["sh", "-c", script, "sh", self.iptables, chain], input=text, timeout=30)

    def _remove(self, node: str, chain: str) -> None:
        run_checked(self.hosts[node], ["sh", "-c", _REMOVE, "sh", self.iptables, chain], timeout=30)

    def drop(self, grudge: Grudge) -> None:
        """Make every node drop packets from the nodes it holds a grudge against (replacing any old one)."""

        def apply(node: str) -> None:
            peers = sorted(grudge.get(node, ()))
            if not peers:
                self._remove(node, CHAIN)
                return
            self._restore(node, CHAIN, [f"-A {CHAIN} -s {self.addresses[p]}/32 -j DROP" for p in peers])

        self._each(list(self.hosts), apply)

    def heal(self) -> None:
        """Remove the partition chain everywhere (whatever state we think we are in)."""
        self._each(list(self.hosts), lambda n: self._remove(n, CHAIN))

    def lose(self, nodes: Sequence[str], probability: float) -> None:
        """Drop each incoming packet on `nodes` with `probability` (from anywhere but loopback)."""
        rule = f"-A {LOSS_CHAIN} ! -i lo -m statistic --mode random --probability {probability:.4f} -j DROP"
        self._each(list(nodes), lambda n: self._restore(n, LOSS_CHAIN, [rule]))

    def heal_loss(self) -> None:
        self._each(list(self.hosts), lambda n: self._remove(n, LOSS_CHAIN))

    def rules(self, node: str) -> str:
        """`iptables -S` of a node, for diagnostics and tests."""
        return run_checked(self.hosts[node], [self.iptables, "-w", "-S"], timeout=30)
