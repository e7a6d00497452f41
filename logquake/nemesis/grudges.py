"""Partitions as data: a grudge maps each node to the nodes whose packets it drops.

Pure functions of (nodes, rng), after Jepsen's nemesis: deciding who is cut off is separate
from cutting (net.py), so every shape is tested without a network. A link between two nodes
is cut when either end holds a grudge against the other (TCP needs both directions).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

__all__ = ["Grudge", "GRUDGES", "CLIENTS", "clients", "complete_grudge", "one", "majority", "majorities_ring", "bridge", "leaders",
           "leader", "busiest_leader", "make_grudge", "cut_links", "describe_grudge"]

Grudge = dict[str, frozenset[str]]


def complete_grudge(components: Iterable[Iterable[str]]) -> Grudge:
    """Every node drops every node outside its own component."""
    comps = [list(c) for c in components]
    everyone = {n for c in comps for n in c}
    return {n: frozenset(everyone - set(c)) for c in comps for n in c}


def _shuffled(nodes: Sequence[str], rng: random.Random) -> list[str]:
    out = list(nodes)
    rng.shuffle(out)
    return out


def one(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """One random node cut off from all others."""
    s = _shuffled(nodes, rng)
    return complete_grudge([s[:1], s[1:]])


def majority(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Bisect: a random minority (floor n/2) against the majority."""
    s = _shuffled(nodes, rng)
    return complete_grudge([s[: len(s) // 2], s[len(s) // 2 :]])


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Every node sees a majority, but no two nodes see the same majority.

    Nodes sit on a random ring and each sees its nearest neighbours, enough of them to make a
    majority with itself. With an odd count of neighbours to pick on an even ring, the node
    opposite is added (still symmetric). On an odd ring that needs an odd count (n = 3, 7, 11)
    no symmetric choice exists (no 3-regular graph on 7 nodes), so each node sees one neighbour
    more on each side: still a distinct majority per node; for n = 3 that means no cut at all.
    """
    ring = _shuffled(nodes, rng)
    n = len(ring)
    if n < 3:
        return one(nodes, rng)
    need = n // 2  # others to see: with itself, floor(n/2)+1 = a majority
    opposite = need % 2 == 1 and n % 2 == 0
    reach = need // 2 if need % 2 == 0 or opposite else need // 2 + 1
    visible: dict[str, set[str]] = {}
    for i, node in enumerate(ring):
        seen = {ring[(i + d) % n] for d in range(-reach, reach + 1)}
        if opposite:
            seen.add(ring[(i + n // 2) % n])
        visible[node] = seen
    return {node: frozenset(set(ring) - visible[node]) for node in ring}


def bridge(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Two halves that cannot talk, and one node in the middle that talks to both."""
    s = _shuffled(nodes, rng)
    if len(s) < 3:
        return one(nodes, rng)
    mid = len(s) // 2
    left, hub, right = s[:mid], s[mid], s[mid + 1 :]
    grudge = complete_grudge([left, right])
    grudge[hub] = frozenset()
    return grudge


def leaders(nodes: Sequence[str], rng: random.Random, *, current: Iterable[str] = ()) -> Grudge:
    """Each current leader alone, the other nodes together; `one` when no leader is known."""
    lead = sorted(set(current) & set(nodes))
    if not lead:
        return one(nodes, rng)
    rest = [n for n in nodes if n not in lead]
    return complete_grudge([[n] for n in lead] + ([rest] if rest else []))


def busiest_leader(nodes: Sequence[str], rng: random.Random, current: Iterable[str]) -> str:
    """The node leading the most partitions (`current` names one leader per partition, so a node
    repeats); ties and an unknown leadership are broken by rng."""
    counts = Counter(n for n in current if n in set(nodes))
    if not counts:
        return rng.choice(list(nodes))
    top = max(counts.values())
    return rng.choice(sorted(n for n, c in counts.items() if c == top))


def leader(nodes: Sequence[str], rng: random.Random, *, current: Iterable[str] = ()) -> Grudge:
    """The busiest leader alone, every other node together.

    Unlike `leaders`, the rest keep a majority: they elect new leaders and write at the offsets
    the isolated one may still be acknowledging (what an early ack or a lost retry needs).
    """
    lead = busiest_leader(nodes, rng, current)
    return complete_grudge([[lead], [n for n in nodes if n != lead]])


CLIENTS = "clients"  # pseudo-node: the harness's client address, for client-broker partitions


def clients(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """A random minority (at least one) of nodes stops hearing the clients; brokers still talk."""
    size = rng.randint(1, max(1, (len(nodes) - 1) // 2))
    cut = set(rng.sample(list(nodes), size))
    return {n: frozenset({CLIENTS}) if n in cut else frozenset() for n in nodes}


GRUDGES: dict[str, Callable[..., Grudge]] = {
    "one": one,
    "majority": majority,
    "majorities-ring": majorities_ring,
    "bridge": bridge,
    "leaders": leaders,
}


# Asked for by name only (`partition:leader`), never drawn at random: keeps the seeded random
# draw over GRUDGES what it was.
EXPLICIT = (CLIENTS, "leader", "replies", "replies-reset")  # replies: see PartitionFault


def make_grudge(kind: str, nodes: Sequence[str], rng: random.Random, *, current_leaders: Iterable[str] = ()) -> Grudge:
    """Grudge `kind` (a key of GRUDGES, or one of EXPLICIT). `current_leaders` names the leader of
    each partition (a node once per partition it leads)."""
    if kind == "leaders":
        return leaders(nodes, rng, current=current_leaders)
    if kind == "leader":
        return leader(nodes, rng, current=current_leaders)
    if kind == CLIENTS:
        return clients(nodes, rng)
    if kind not in GRUDGES:
        raise ValueError(f"unknown partition {kind!r}; allowed: {', '.join([*GRUDGES, *EXPLICIT])}")
    return GRUDGES[kind](nodes, rng)


def cut_links(grudge: Grudge) -> set[frozenset[str]]:
    """Unordered node pairs that cannot talk under this grudge."""
    return {frozenset((a, b)) for a, drops in grudge.items() for b in drops if a != b}


def describe_grudge(grudge: Grudge) -> str:
    """Plain words, e.g. `n1 drops n3,n4; n2 drops n3,n4; ...` (empty grudges omitted)."""
    parts = [f"{n} drops {','.join(sorted(d))}" for n, d in sorted(grudge.items()) if d]
    return "; ".join(parts) or "no cuts"
