"""What `logquake cluster up|status|down` do; cli.py only parses flags and calls these."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from logquake.cluster.backends import open_cluster
from logquake.cluster.lab import LabCluster, attach_lab, prepare_lab
from logquake.cluster.state import LabState, destroy, is_running, load_states
from logquake.cluster.userns import in_private_userns, join_userns
from logquake.config import TestConfig
from logquake.errors import UserError
from logquake.systems import get_system
from logquake.systems.kafka import PidSignals

__all__ = ["cluster_up", "cluster_status", "cluster_down"]

# `cluster up` without --dir keeps its nodes here; `cluster down` removes such a directory. A
# run's own cluster lives in its results directory, which down never touches.
SCRATCH_PREFIX = "logquake-lab-"


def cluster_up(*, nodes: int, run_dir: Path | None, wait: float, console: Console) -> None:
    """Start a lab cluster that outlives this command; print its bootstrap servers."""
    prepare_lab()  # before the spinner's thread: a user namespace needs a single-threaded process
    cfg = TestConfig(nodes=nodes, replication_factor=min(3, nodes))
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    with console.status(f"starting {nodes} lab nodes"):
        cluster = open_cluster(cfg, run_dir)
    assert isinstance(cluster, LabCluster)  # the lab backend's, by cfg.backend
    ready = True
    if wait > 0:
        with console.status("waiting for the brokers"):
            try:
                cluster.wait_ready(wait)
            except UserError:
                raise
            except Exception as e:  # the lab stays up: the user can look at the logs
                ready = False
                console.print(f"[yellow]brokers not ready:[/] {e}")
    st = cluster.state
    console.print(f"cluster [bold]{st.cluster_id}[/] up ({st.mode}), {'ready' if ready else 'NOT ready'}; "
                  f"node directories under {run_dir}/nodes")
    if st.mode == "userns" and st.anchor is not None:
        console.print("[dim]addresses live in a private user namespace; reach them with "
                      f"`nsenter --preserve-credentials -U -n -t {st.anchor.pid} <cmd>`[/]")
    print(cluster.bootstrap_servers)


def _select(cluster_id: str | None) -> list[LabState]:
    states = load_states()
    if cluster_id:
        states = [s for s in states if s.cluster_id == cluster_id]
        if not states:
            raise UserError(f"no lab cluster {cluster_id!r}", hint="`logquake cluster status` lists them")
    return states


def cluster_status(*, cluster_id: str | None, console: Console) -> None:
    states = _select(cluster_id)
    if not states:
        console.print("no lab clusters")
        return
    joined = None
    for st in states:
        if st.mode == "userns" and not in_private_userns() and st.anchor and is_running(st.anchor):
            if joined is None:
                join_userns(st.anchor.pid)  # needs a single-threaded process: before any client starts
                joined = st.anchor.userns
        if st.mode == "userns" and st.anchor and st.anchor.userns != joined:
            console.print(f"cluster {st.cluster_id}: in another user namespace; "
                          f"run `logquake cluster status --id {st.cluster_id}`")
            continue
        table, bootstrap = _table(st)
        console.print(table)
        # soft_wrap: the list is copied into clients, so it is never broken mid-address
        console.print(f"bootstrap servers: {bootstrap}", soft_wrap=True, highlight=False)


def _table(st: LabState) -> tuple[Table, str]:
    # `cluster up` starts the embedded broker, whose processes are known by pid files.
    cluster = attach_lab(st, get_system("kafka"))
    lifecycle = cluster.lifecycle
    assert isinstance(lifecycle, PidSignals)
    leaders = cluster.leaders(timeout=3.0)
    table = Table(title=f"lab cluster {st.cluster_id} ({st.mode})")
    for col in ("node", "address", "pid", "up", "leader of"):
        table.add_column(col)
    for node in cluster.nodes:
        pid = lifecycle.pid(node)
        up = lifecycle.is_up(node)
        led = [tp for tp, n in leaders.items() if n == node]
        table.add_row(node, cluster.addresses[node], str(pid or "-"), "[green]yes[/]" if up else "[red]no[/]",
                      ", ".join(led) or "-")
    return table, cluster.bootstrap_servers


def cluster_down(*, cluster_id: str | None, everything: bool = False, console: Console) -> None:
    """Remove clusters: those started by `cluster up` and those a dead harness left behind.

    A cluster whose harness still runs (a `logquake run` in progress) is spared unless named
    with --id or --all is given: tearing it down would sabotage that run.
    """
    states = _select(cluster_id)
    if not states:
        console.print("no lab clusters")
        return
    for st in states:
        if not cluster_id and not everything and st.owner_alive() and st.owner.pid != os.getpid():
            console.print(f"cluster {st.cluster_id}: spared, its harness (pid {st.owner.pid}) is running; "
                          "use --id or --all")
            continue
        problems = destroy(st)
        if problems:
            console.print(f"[red]cluster {st.cluster_id}: {'; '.join(problems)}[/]")
        else:
            if scratch_dir(st) is not None:
                shutil.rmtree(st.run_dir, ignore_errors=True)
            console.print(f"cluster {st.cluster_id} down")


def scratch_dir(st: LabState) -> Path | None:
    """The node directory `cluster up` made for itself (None for --dir or a run's own)."""
    d = Path(st.run_dir)
    return d if d.parent == Path(tempfile.gettempdir()) and d.name.startswith(SCRATCH_PREFIX) else None
