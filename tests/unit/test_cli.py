from __future__ import annotations

import subprocess
import sys


def logquake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logquake", *args], capture_output=True, text=True, timeout=60)


def test_help_lists_every_command() -> None:
    out = logquake("--help")
    assert out.returncode == 0
    for command in ("run", "check", "report", "serve", "cluster", "broker", "test-all"):
        assert command in out.stdout


def test_user_errors_are_one_red_line_not_a_traceback(tmp_path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("nodez: 3\n")
    out = logquake("run", "--config", str(bad))
    assert out.returncode == 3
    assert "Traceback" not in out.stderr
    assert "ConfigError" in out.stderr and "nodez" in out.stderr


def test_usage_errors_have_their_own_exit_code_apart_from_unknown() -> None:
    # 2 is an `unknown` verdict: a CI script must tell a typo from an inconclusive test.
    for args in (("run", "--seed", "abc"), ("run", "--nodez", "3"), ("check",)):
        out = logquake(*args)
        assert out.returncode == 4, (args, out.stderr)
        assert "Traceback" not in out.stderr


def test_help_lists_every_exit_code() -> None:
    out = logquake("--help")
    text = " ".join(out.stdout.split())
    for code in ("0 valid", "1 invalid", "2 unknown", "3 the test could not run", "4 usage error"):
        assert code in text
    assert "4 usage error" in " ".join(logquake("run", "--help").stdout.split())


def test_version() -> None:
    from logquake import __version__

    out = logquake("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"logquake {__version__}"


def test_run_help_lists_every_fault_family_and_the_defaults() -> None:
    text = " ".join(logquake("run", "--help").stdout.replace("│", " ").split())
    for word in ("packet-loss", "stale-leader", "family:variant", "default partition,kill", "default 10",
                 "--replication-factor", "default min(3, nodes)", "default assign", "default confluent"):
        assert word in text, word
