"""Which client runs the pipeline: the adapter table, the config's refusal, what test.json says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from logquake.checker.pipeline import check_pipeline
from logquake.config import resolve_config
from logquake.errors import ConfigError
from logquake.guarantees import apply_guarantee
from logquake.history import OK, Op
from logquake.workloads import get_workload, pipeline
from logquake.workloads.registry import describe


def test_every_client_the_workload_names_has_an_adapter_of_that_name():
    assert get_workload("pipeline").clients == tuple(pipeline.ADAPTERS)
    for client in pipeline.ADAPTERS:
        assert pipeline.get_adapter(client).client == client
    with pytest.raises(ConfigError, match="client: the pipeline workload is driven by confluent, nats-py; got 'x'"):
        pipeline.get_adapter("x")


def test_jetstream_runs_the_pipeline_with_nats_py():
    cfg = resolve_config(None, {"system": "jetstream", "workload": "pipeline", "guarantee": "exactly-once"})
    assert cfg.client == "nats-py"
    d = describe(apply_guarantee(cfg))
    # What test.json says is what the workers do: no Kafka transaction, a Msg-Id and a double ack.
    assert d["offset_commit"] == "double ack (ack_sync) after the result's PubAck"
    assert d["producer_config"]["Nats-Msg-Id"] == "<input stream>:<input sequence>"
    assert "output-reorder" in d["allowed_anomalies"] and "double-processing" not in d["allowed_anomalies"]
    kafka = describe(apply_guarantee(resolve_config(None, {"workload": "pipeline", "guarantee": "exactly-once"})))
    assert kafka["offset_commit"] == "in-transaction" and kafka["allowed_anomalies"] == []


def test_a_client_without_a_pipeline_adapter_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as got:
        resolve_config(None, {"workload": "pipeline", "client": "kafka-python"})
    assert str(got.value).startswith("client: workload pipeline is driven by confluent, nats-py; got 'kafka-python'")
    cmd = [sys.executable, "-m", "logquake", "run", "--workload", "pipeline", "--client", "kafka-python"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    out = (p.stdout + p.stderr).strip()
    assert p.returncode not in (0, 1) and "Traceback" not in out, out
    assert "client" in out and "kafka-python" in out and len([ln for ln in out.splitlines() if ln.strip()]) <= 2, out


def _history(outputs: list[tuple[int, int, int]]) -> list[Op]:
    """Inputs 1 and 2 of key 0, then an output read of (offset, k, v) records of output key 0."""
    ops = [Op(index=0, time=0, process=-1, type=OK, f="input", value=[["send", 0, [0, 1]], ["send", 0, [1, 2]]])]
    polled = {"0": [[o, [k, v]] for o, k, v in outputs]}
    return ops + [Op(index=1, time=1, process=-2, type=OK, f="poll", value=[["poll", polled]])]


def test_a_shared_consumer_allows_one_keys_outputs_out_of_order_and_nothing_else():
    swapped = _history([(1, 0, 2), (2, 0, 1)])
    assert check_pipeline(swapped, guarantee="exactly-once")["bad_error_types"] == ["output-reorder"]
    shared = check_pipeline(swapped, guarantee="exactly-once", shared_consumer=True)
    assert (shared["valid"], shared["error_types"]) == (True, ["output-reorder"])
    twice = check_pipeline(_history([(1, 0, 1), (2, 0, 2), (3, 0, 1)]), guarantee="exactly-once", shared_consumer=True)
    assert (twice["valid"], twice["bad_error_types"]) == (False, ["double-processing"])
