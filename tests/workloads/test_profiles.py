"""Delivery guarantees: guarantee -> client configs and checker verdicts (DESIGN.md §6)."""

from __future__ import annotations

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.checker.options import QUEUE_TYPES, allowed_types
from logquake.checker.pipeline import PIPELINE_TYPES, check_pipeline
from logquake.config import TestConfig
from logquake.errors import ConfigError
from logquake.guarantees import GUARANTEES, apply_guarantee, get_guarantee
from logquake.history import Op
from logquake.workloads import confluent, kafkapython
from logquake.workloads.queue import producer_settings
from logquake.workloads.registry import describe


def _cfg(**kw) -> TestConfig:
    return apply_guarantee(TestConfig(**kw).with_seed())


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_at_most_once_sends_once_without_idempotence(client):
    d = describe(_cfg(guarantee="at-most-once", client=client))
    p = d["producer_config"]
    assert str(p["acks"]) in ("0", "1") and p["retries"] == 0
    assert p.get("enable.idempotence", p.get("enable_idempotence")) is False
    assert d["offset_commit"] == "before"


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_at_least_once_is_acks_all_with_retries_and_no_idempotence(client):
    d = describe(_cfg(guarantee="at-least-once", client=client))
    p = d["producer_config"]
    assert p["acks"] == "all" and "retries" not in p  # the library's (unbounded) default
    assert p.get("enable.idempotence", p.get("enable_idempotence")) is False
    assert "transactional.id" not in p and "transactional_id" not in p
    assert d["offset_commit"] == "after"


def test_exactly_once_is_idempotent_transactional_and_read_committed():
    cfg = _cfg(guarantee="exactly-once")
    assert cfg.txn
    c = confluent.producer_config("h:1", txn=cfg.txn, producer=producer_settings(cfg))
    assert c["enable.idempotence"] is True and c["acks"] == "all" and "transactional.id" in c
    assert confluent.consumer_config("h:1", txn=cfg.txn, sub_via="assign")["isolation.level"] == "read_committed"
    k = kafkapython.producer_config("h:1", txn=cfg.txn, producer=producer_settings(cfg))
    assert k["enable_idempotence"] is True and "transactional_id" in k
    d = describe(cfg)
    assert d["offset_commit"] == "in-transaction"
    assert d["producer_config"]["transactional.id"] == "lq-txn-<pid>-<n>"


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_idempotent_is_acks_all_idempotence_without_transactions(client):
    d = describe(_cfg(guarantee="idempotent", client=client))
    p = d["producer_config"]
    assert p["acks"] == "all" and p.get("enable.idempotence", p.get("enable_idempotence")) is True
    assert "transactional.id" not in p and "transactional_id" not in p
    assert d["offset_commit"] == "after"


def test_user_producer_settings_override_the_profile():
    cfg = _cfg(guarantee="at-least-once", producer={"acks": "1", "retries": 3})
    c = confluent.producer_config("h:1", txn=False, producer=producer_settings(cfg))
    assert c["acks"] == "1" and c["retries"] == 3 and c["enable.idempotence"] is False


def test_at_most_once_with_transactions_is_a_config_error():
    with pytest.raises(ConfigError):
        _cfg(guarantee="at-most-once", txn=True)
    with pytest.raises(ConfigError):
        get_guarantee("maybe-once")


@pytest.mark.parametrize("name", list(GUARANTEES))
def test_profile_bad_types_match_the_checker(name):
    """The guarantee's record and the checker's allowed set agree on every queue anomaly type."""
    prof = GUARANTEES[name]
    checker = allowed_types(CheckOptions(guarantee=name, ww_deps=False))
    assert {t for t in QUEUE_TYPES if t in prof.allowed} == {t for t in QUEUE_TYPES if t in checker}


@pytest.mark.parametrize("name", list(GUARANTEES))
def test_test_json_lists_what_the_pipeline_checker_tolerates(name):
    """test.json's allowed_anomalies of a pipeline run are the pipeline types its checker lets pass."""
    listed = set(describe(_cfg(workload="pipeline", guarantee=name))["allowed_anomalies"])
    ops = [Op(index=0, time=0, process=0, type="invoke", f="input", value=[["send", 0, 1], ["send", 0, 2]]),
           Op(index=1, time=1, process=0, type="ok", f="input", value=[["send", 0, [0, 1]], ["send", 0, [1, 2]]]),
           Op(index=2, time=2, process=1, type="invoke", f="poll", value=[["poll"]]),
           # 2 reaches the output before 1 (output-reorder), and 1 twice (double-processing)
           Op(index=3, time=3, process=1, type="ok", f="poll", value=[["poll", {"100": [[0, [0, 2]], [1, [0, 1]],
                                                                                          [2, [0, 1]]]}]])]
    res = check_pipeline(ops, guarantee=name)
    assert set(res["error_types"]) == {"double-processing", "output-reorder"}
    assert {t for t in res["error_types"] if t not in res["bad_error_types"]} == listed & set(res["error_types"])
    assert listed <= set(PIPELINE_TYPES)


def _send(i, p, k, v, off):
    return [Op(index=2 * i, time=i * 10, process=p, type="invoke", f="send", value=[["send", k, v]]),
            Op(index=2 * i + 1, time=i * 10 + 5, process=p, type="ok", f="send", value=[["send", k, [off, v]]])]


def _poll(i, p, reads):
    return [Op(index=2 * i, time=i * 10, process=p, type="invoke", f="poll", value=[["poll"]]),
            Op(index=2 * i + 1, time=i * 10 + 5, process=p, type="ok", f="poll",
               value=[["poll", {"0": reads}]])]


def _bad(ops, guarantee):
    return set(check_history(ops, CheckOptions(guarantee=guarantee))["bad_error_types"])


def test_a_duplicate_is_bad_except_at_least_once():
    ops = [*_send(0, 0, 0, 1, 0), *_send(1, 0, 0, 2, 1), *_send(2, 1, 0, 1, 2),
           *_poll(3, 2, [[0, 1], [1, 2], [2, 1]])]
    assert "duplicate" in _bad(ops, "exactly-once")
    assert "duplicate" in _bad(ops, "idempotent")
    assert "duplicate" in _bad(ops, "at-most-once")
    assert "duplicate" not in _bad(ops, "at-least-once")


def test_a_lost_write_is_bad_except_at_most_once():
    ops = [*_send(0, 0, 0, 1, 0), *_send(1, 0, 0, 2, 1), *_send(2, 0, 0, 3, 2), *_poll(3, 2, [[0, 1], [2, 3]])]
    assert "lost-write" in _bad(ops, "exactly-once")
    assert "lost-write" in _bad(ops, "at-least-once")
    assert "lost-write" in _bad(ops, "idempotent")
    assert "lost-write" not in _bad(ops, "at-most-once")


def test_pipeline_configs_follow_the_profile():
    eos = describe(_cfg(workload="pipeline", guarantee="exactly-once"))
    assert eos["producer_config"]["transactional.id"] == "lq-pipe-0"  # stable per worker: zombie fencing
    assert eos["consumer_config"]["isolation.level"] == "read_committed"
    assert eos["consumer_config"]["enable.auto.commit"] is False
    alo = describe(_cfg(workload="pipeline", guarantee="at-least-once"))
    assert "transactional.id" not in alo["producer_config"] and alo["offset_commit"] == "after"


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_an_offsets_run_describes_its_own_consumers_not_the_queue_clients(client):
    d = describe(_cfg(workload="offsets", client=client))
    assert d["producer_config"] == {}  # the workload produces nothing
    assert d["allowed_anomalies"] == []  # it is checked as registers, not queue anomalies
    group = d["consumer_config"].get("group.id", d["consumer_config"].get("group_id"))
    assert group == "lq-offsets-<n>"
    assert "isolation.level" not in d["consumer_config"] and "transactional.id" not in d["producer_config"]
