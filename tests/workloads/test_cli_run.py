"""`logquake run` flags and the could-not-run exit code, without a cluster."""

from __future__ import annotations

from logquake.cli import main


def test_bad_flag_values_name_the_key_and_exit_3(tmp_path, capsys):
    assert main(["run", "--client", "java", "--results-dir", str(tmp_path)]) == 3
    assert "client" in capsys.readouterr().err
    assert main(["run", "--nemesis", "earthquake", "--results-dir", str(tmp_path)]) == 3
    assert "earthquake" in capsys.readouterr().err


def test_a_run_that_cannot_start_exits_3_and_keeps_its_run_directory(tmp_path, capsys):
    cfg = tmp_path / "t.yaml"
    cfg.write_text("backend: ssh\nname: nohosts\n")  # ssh without hosts: the cluster refuses
    assert main(["run", "--config", str(cfg), "--results-dir", str(tmp_path / "r"), "--time-limit", "1"]) == 3
    err = capsys.readouterr().err
    assert "hosts" in err and "harness.log" in err
    runs = list((tmp_path / "r" / "nohosts").iterdir())
    assert len(runs) == 1 and (runs[0] / "test.json").is_file() and (runs[0] / "harness.log").is_file()
