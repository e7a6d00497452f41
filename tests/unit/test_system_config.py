"""`system:` at config load: each system's clients, workloads and faults, refused in one line naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from logquake.config import resolve_config
from logquake.errors import ConfigError


def _refused(tmp_path: Path, *flags: str, yaml: str = "") -> str:
    """`logquake run` with flags (and a config file when `yaml`): the error line, after checking the exit."""
    cmd = [sys.executable, "-m", "logquake", "run", "--results-dir", str(tmp_path / "results"), *flags]
    if yaml:
        (tmp_path / "t.yaml").write_text(yaml)
        cmd += ["--config", str(tmp_path / "t.yaml")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert out.returncode == 3, (flags, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert not (tmp_path / "results").exists()  # refused before anything ran
    return lines[0]


@pytest.mark.parametrize(("flags", "yaml", "key", "words"), [
    ((), "system: jetstream\njetstream: {sync_intervall: always}\n", "jetstream.sync_intervall", "unknown setting"),
    (("--system", "jetstream", "--client", "confluent"), "", "client", "nats-py"),
    (("--system", "jetstream", "--nemesis", "clock"), "", "nemesis", "static Go binary"),
])
def test_cli_refuses_what_jetstream_cannot_do(tmp_path: Path, flags: tuple[str, ...], yaml: str, key: str,
                                              words: str) -> None:
    line = _refused(tmp_path, *flags, yaml=yaml)
    assert f"ConfigError: {key}:" in line and words in line, line


@pytest.mark.parametrize(("values", "key"), [
    ({"partitions": 2}, "partitions"),
    ({"workload": "offsets"}, "workload"),
    ({"backend": "external", "bootstrap_servers": ["x:1"]}, "backend"),
    ({"nemesis": "partition,clock:strobe"}, "nemesis"),
    ({"jetstream": {"replicas": 4}, "nodes": 3}, "jetstream.replicas"),
    ({"jetstream": {"sync_interval": "sometimes"}}, "jetstream.sync_interval"),
    ({"jetstream": "always"}, "jetstream"),
    ({"jetstream": {"kv_reads": "follower"}}, "jetstream.kv_reads"),
])
def test_jetstream_refusals_name_the_key(values: dict, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        resolve_config(None, {"system": "jetstream", **values})
    assert e.value.key == key


def test_the_client_defaults_by_system() -> None:
    cfg = resolve_config(None, {"system": "jetstream", "jetstream": {"sync_interval": "always"}, "nodes": 3})
    assert (cfg.client, cfg.jetstream, cfg.replication_factor) == ("nats-py", {"sync_interval": "always"}, 3)
    assert resolve_config(None, {}).client == "confluent"
    assert resolve_config(None, {"backend": "external", "bootstrap_servers": ["x:1"]}).client == "confluent"


def test_settings_of_another_system_are_refused() -> None:
    with pytest.raises(ConfigError) as e:
        resolve_config(None, {"jetstream": {"sync_interval": "always"}})
    assert e.value.key == "jetstream"
    with pytest.raises(ConfigError) as e:
        resolve_config(None, {"system": "jetstream", "broker": {"fsync": "never"}})
    assert e.value.key == "broker"
    with pytest.raises(ConfigError) as e:
        resolve_config(None, {"client": "nats-py"})
    assert e.value.key == "client"
