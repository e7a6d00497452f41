"""What an older nats-server (Debian's 2.9.10) is asked for: only what the test uses.

Transactions are atomic batches (2.12+): the queue's `txn` and exactly-once are refused there
in one line naming the version; the pipeline's exactly-once (a derived Msg-Id and a double
ack) and the kv workload run. The drain's reads from each node need message tracing (2.11+):
on an older server they are skipped, saying why, and the verdict is what it was. No server
is started here (tests/e2e runs them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.config import TestConfig, resolve_config
from logquake.errors import ConfigError
from logquake.guarantees import GUARANTEES, apply_guarantee
from logquake.results.report import node_read_rows, node_reads_skipped
from logquake.runner import with_drain
from logquake.systems import NODE_READS
from logquake.systems.jetstream import JETSTREAM, batch
from logquake.systems.jetstream.client import node_reads_refusal
from logquake.systems.jetstream.server import server_version
from logquake.systems.jetstream.system import transactions_refusal
from logquake.workloads import WORKLOADS
from tests.checker.histories import H
from tests.checker.test_final_read_nodes import final_read, three_sends
from tests.unit.test_system_config import _refused

from .test_jetstream_batch import OLD_SERVER

old_server = pytest.mark.skipif(OLD_SERVER is None,
                                reason="no nats-server older than 2.12 here (Debian's: apt-get install nats-server)")


def _old(**values) -> dict:
    return {"system": "jetstream", "jetstream": {"binary": OLD_SERVER}, **values}


@pytest.mark.parametrize(("values", "needs"), [
    ({"workload": "queue"}, {}),
    ({"workload": "queue", "txn": True}, {"transactions": "txn"}),
    ({"workload": "queue", "guarantee": "exactly-once"}, {"transactions": "guarantee"}),
    ({"workload": "pipeline", "guarantee": "exactly-once"}, {"transactions": "guarantee"}),  # Kafka's: in a txn
    ({"workload": "pipeline", "guarantee": "exactly-once", "system": "jetstream", "client": "nats-py"}, {}),
    ({"workload": "pipeline", "guarantee": "idempotent"}, {}),
    ({"workload": "kv", "guarantee": "exactly-once", "system": "jetstream", "client": "nats-py"}, {}),
    ({"workload": "offsets", "guarantee": "exactly-once"}, {}),
])
def test_a_workload_declares_the_transactions_its_test_uses(values: dict, needs: dict) -> None:
    cfg = TestConfig(**values)
    assert dict(WORKLOADS[cfg.workload].needs(cfg)) == needs


@pytest.mark.parametrize(("workload", "txn"), [("queue", True), ("pipeline", False), ("kv", False)])
def test_exactly_once_brings_transactions_only_where_the_workload_uses_them(workload: str, txn: bool) -> None:
    cfg = apply_guarantee(resolve_config(None, {"system": "jetstream", "workload": workload,
                                                "guarantee": "exactly-once"}))
    assert cfg.txn is txn  # what test.json stores (and the results browser shows)
    assert cfg.producer["idempotence"] is True


def test_kafkas_exactly_once_pipeline_still_runs_in_transactions() -> None:
    assert apply_guarantee(resolve_config(None, {"workload": "pipeline", "guarantee": "exactly-once"})).txn


@old_server
@pytest.mark.parametrize("guarantee", sorted(GUARANTEES))
def test_the_pipeline_runs_on_a_server_without_atomic_batches_under_every_guarantee(guarantee: str) -> None:
    cfg = apply_guarantee(resolve_config(None, _old(workload="pipeline", guarantee=guarantee)))
    assert (cfg.workload, cfg.guarantee, cfg.txn) == ("pipeline", guarantee, False)


@old_server
def test_kv_is_not_refused_for_a_guarantee_it_does_not_use() -> None:
    assert resolve_config(None, _old(workload="kv", guarantee="exactly-once")).workload == "kv"


@old_server
@pytest.mark.parametrize(("values", "key"), [({"txn": True}, "txn"), ({"guarantee": "exactly-once"}, "guarantee"),
                                             ({"txn": True, "guarantee": "idempotent"}, "txn")])
def test_the_queues_transactions_are_refused_there_naming_the_key_and_version(values: dict, key: str) -> None:
    version = server_version(str(OLD_SERVER))
    assert not batch.supports_atomic(version)
    with pytest.raises(ConfigError) as e:
        resolve_config(None, _old(workload="queue", **values))
    assert e.value.key == key
    assert f"nats-server {version} ({OLD_SERVER}) has no atomic batch publish" in str(e.value)


@old_server
def test_the_cli_refuses_the_queues_exactly_once_there_in_one_line(tmp_path: Path) -> None:
    line = _refused(tmp_path, "--guarantee", "exactly-once",
                    yaml=f"system: jetstream\njetstream: {{binary: {OLD_SERVER}}}\n")
    assert f"ConfigError: guarantee: nats-server {server_version(str(OLD_SERVER))}" in line, line


@pytest.mark.parametrize(("version", "why"), [
    ("v2.9.10", "has no atomic batch publish"),
    ("v2.12.0", "takes no Nats-Msg-Id in an atomic batch, which a transactional producer sends "
                "(nats-server 2.12.1 and later)"),
    ("v2.12.1", None), ("v2.15.1", None),
])
def test_transactions_need_atomic_batches_that_take_msg_ids(version: str, why: str | None) -> None:
    refusal = transactions_refusal("/bin/nats-server", version)
    assert refusal == why if why is None else why in refusal and version in refusal, refusal


# -- the drain's reads from each node need 2.11+ (message tracing): skipped, saying why ------


@pytest.mark.parametrize(("version", "why"), [
    ("v2.9.10", "needs nats-server 2.11+ (message tracing, batched direct gets), this is 2.9.10"),
    ("2.10.22", "needs nats-server 2.11+ (message tracing, batched direct gets), this is 2.10.22"),
    ("", "needs nats-server 2.11+ (message tracing, batched direct gets), this is unknown"),
    ("v2.11.0", None), ("v2.15.1", None), ("v3.0.0-RC.1", None),
])
def test_node_reads_need_message_tracing(version: str, why: str | None) -> None:
    assert node_reads_refusal(version) == why


def test_the_pinned_server_serves_node_reads() -> None:
    cfg = resolve_config(None, {"system": "jetstream"})
    assert JETSTREAM.unavailable(cfg, NODE_READS) is None


@old_server
def test_an_old_servers_node_reads_are_unavailable_naming_its_version() -> None:
    cfg = resolve_config(None, _old())  # not refused: the node reads are extra evidence
    version = server_version(str(OLD_SERVER)).lstrip("v")
    assert JETSTREAM.unavailable(cfg, NODE_READS) == (
        f"needs nats-server 2.11+ (message tracing, batched direct gets), this is {version}")


def _node_read_failing(h: H, p: int, node: str, polls: int) -> None:
    """What a node's reader recorded on 2.9.10 before: an ok final assign with no end, then
    info polls (each a new process), none reaching anything."""
    mark = {"final": True, "node": node}
    h._add(process=p, type="invoke", f="assign", value=[0], extra={**mark, "seek_to_beginning": True})
    h._add(process=p, type="ok", f="assign", value=[0],
           extra={**mark, "seek_to_beginning": True, "ends": {"0": None}, "not_held": []})
    for i in range(polls):
        h._add(process=p + 10 * i, type="invoke", f="poll", value=[["poll"]], extra=dict(mark))
        h._add(process=p + 10 * i, type="info", f="poll", value=[["poll"]],
               extra={**mark, "error": f"NodeReadError: {node}: reading from one node needs nats-server 2.11+"})


@pytest.mark.parametrize(("combined", "valid", "bad"), [
    ({0: [(1, 1), (2, 2), (3, 3)]}, True, []),
    ({0: [(1, 1), (2, 2)]}, False, ["lost", "unseen"]),  # the combined read alone decides `lost`
])
def test_skipping_the_node_reads_leaves_the_verdict_as_it_was(combined: dict, valid: bool, bad: list) -> None:
    verdicts = []
    for node_reads in ("failing", "skipped"):
        h = three_sends()
        final_read(h, 5, {0: 1 + max(o for o, _ in combined[0])}, combined)
        if node_reads == "failing":
            for i, node in enumerate(("n1", "n2", "n3")):
                _node_read_failing(h, 6 + i, node, polls=20)
        r = check_history(h.ops, CheckOptions())
        drain = {"complete": True, "workers_short": []}
        drain |= ({"node_reads": {"n1": False, "n2": False, "n3": False}} if node_reads == "failing"
                  else {"node_reads_skipped": node_reads_refusal("v2.9.10")})
        r = with_drain(r, drain)
        assert (r["valid"], r["bad_error_types"]) == (valid, bad), (node_reads, r)
        verdicts.append({k: r[k] for k in ("valid", "bad_error_types", "error_types")})
        assert ("nodes" in r["final_read"]) is (node_reads == "failing")
    assert verdicts[0] == verdicts[1]


def test_the_report_says_why_the_node_reads_did_not_run() -> None:
    why = node_reads_refusal("v2.9.10")
    results = {"drain": {"complete": True, "node_reads_skipped": why}, "final_read": {"ran": True}}
    assert node_reads_skipped(results) == why and node_read_rows(results) == []
    assert node_reads_skipped({"drain": {"complete": True, "node_reads": {"n1": True}}}) is None
