"""What an older nats-server (Debian's 2.9.10) is asked for: only what the workload uses.

Transactions are atomic batches (2.12+): the queue's `txn` and exactly-once are refused there
in one line naming the version; the pipeline's exactly-once (a derived Msg-Id and a double
ack) and the kv workload run. No server is started here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logquake.config import TestConfig, resolve_config
from logquake.errors import ConfigError
from logquake.guarantees import GUARANTEES, apply_guarantee
from logquake.systems.jetstream import batch
from logquake.systems.jetstream.server import server_version
from logquake.workloads import WORKLOADS
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
