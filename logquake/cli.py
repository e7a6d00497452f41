"""The `logquake` command line.

This module alone catches `LogquakeError`: it prints `Name: message` and the hint in red,
with no traceback, and exits 3 (`check` keeps 0 valid / 1 invalid / 2 unknown); a command
line that does not parse exits 4 (EXIT_USAGE), apart from the verdicts' codes. Anything else is a logquake bug and keeps its traceback.

Each command parses its flags here and hands off to the subpackage that does the work;
no analysis, cluster or broker logic lives in this file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from logquake.errors import LogquakeError

EXIT_USER_ERROR = 3
#: A command line logquake cannot parse (an unknown flag, `--seed abc`); pytest's code for it.
#: Apart from 2, an `unknown` verdict, so a script can tell a typo from an inconclusive test.
EXIT_USAGE = 4
EXIT_CODES = ("Exit codes: 0 valid, 1 invalid, 2 unknown, 3 the test could not run (a bad config, "
              "no cluster), 4 usage error (unknown flag, bad value), 130 aborted by a second Ctrl-C.")

app = typer.Typer(
    help="logquake: fault-injection testing for replicated logs (Kafka protocol).\n\n" + EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
cluster_app = typer.Typer(help="Bring a lab cluster up, show it, tear it down.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")

err_console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from logquake import __version__

        typer.echo(f"logquake {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """logquake: fault-injection testing for replicated logs (Kafka protocol)."""


@app.command()
def run(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Test config YAML.")] = None,
    workload: Annotated[str | None, typer.Option(help="queue | pipeline | offsets | kv (default queue).")] = None,
    system: Annotated[
        str | None, typer.Option(help="The system under test: kafka | jetstream (default kafka).")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="Broker nodes (default 5).")] = None,
    time_limit: Annotated[float | None, typer.Option(help="Seconds of the main phase (default 45).")] = None,
    rate: Annotated[float | None, typer.Option(help="Target ops/s over all workers (default 100).")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Client workers (default 10).")] = None,
    nemesis: Annotated[
        str | None,
        typer.Option(help="Faults, comma-separated: partition, kill, pause, clock, disk, packet-loss, stale-leader, "
                          "pause-kill, partition-kill, "
                          "each optionally as family:variant (partition:leader); `none` for a calm run "
                          "(default partition,kill)."),
    ] = None,
    nemesis_interval: Annotated[
        float | None, typer.Option(help="Mean seconds between fault flips (default 10).")
    ] = None,
    replication_factor: Annotated[
        int | None, typer.Option(help="Replicas per partition, at most --nodes (default min(3, nodes)).")
    ] = None,
    txn: Annotated[
        bool | None, typer.Option("--txn/--no-txn", help="Ops are transactions of 1-4 micro-ops (default no).")
    ] = None,
    sub_via: Annotated[str | None, typer.Option(help="assign | subscribe (default assign).")] = None,
    key_count: Annotated[int | None, typer.Option(help="queue: keys written at a time (default 10).")] = None,
    max_writes_per_key: Annotated[
        int | None,
        typer.Option(help="queue: a key is retired after a random 1..this many writes, a fresh one (a new topic) "
                          "taking its place (default 1024)."),
    ] = None,
    guarantee: Annotated[
        str | None,
        typer.Option(help="Delivery guarantee profile: at-most-once | at-least-once | idempotent | exactly-once "
                          "(sets client configs and which anomalies are bad; default at-least-once)."),
    ] = None,
    client: Annotated[
        str | None,
        typer.Option(help="confluent | kafka-python | nats-py (default confluent; nats-py for jetstream)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="RNG seed for ops and faults (random if unset).")] = None,
    name: Annotated[str | None, typer.Option(help="Test name (results/<name>/...; default the workload).")] = None,
    results_dir: Annotated[str | None, typer.Option(help="Where run directories go (default results).")] = None,
    backend: Annotated[str | None, typer.Option(help="lab | docker | ssh | external (default lab).")] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="external backend: the cluster's host:port list, comma-separated.")
    ] = None,
) -> None:
    """Run one test: cluster up, workload + nemesis, heal, drain, analyse, store.

    Exit 0 valid, 1 invalid, 2 unknown, 3 the test could not run, 4 usage error.
    """
    from logquake.config import RUN_DEFAULTS, resolve_config
    from logquake.display import run_with_display

    cfg = resolve_config(
        config,
        {
            "workload": workload, "system": system, "nodes": nodes, "time_limit": time_limit, "rate": rate, "concurrency": concurrency,
            "nemesis": nemesis, "nemesis_interval": nemesis_interval, "txn": txn, "sub_via": sub_via,
            "key_count": key_count, "max_writes_per_key": max_writes_per_key,
            "guarantee": guarantee, "client": client, "seed": seed, "name": name, "results_dir": results_dir,
            "backend": backend, "bootstrap_servers": bootstrap_servers, "replication_factor": replication_factor,
        },
        defaults=RUN_DEFAULTS,
    )
    raise typer.Exit(run_with_display(cfg, Console()))


_MAX_MEMORY_HELP = ("Refuse, before reading it, a history that would take more memory than this (e.g. 8G; "
                    "K, M, G, T are powers of 1024).")


def _max_memory(text: str) -> int:
    from logquake.checker.memory import parse_size
    from logquake.errors import ConfigError

    try:
        return parse_size(text)
    except ValueError as e:
        raise ConfigError("--max-memory", str(e)) from None


@app.command()
def check(
    history: Annotated[Path, typer.Argument(help="A history.jsonl file (or a run directory).")],
    sub_via: Annotated[str | None, typer.Option("--sub-via", help="assign or subscribe.")] = None,
    txn: Annotated[bool, typer.Option("--txn", help="The workload used transactions.")] = False,
    no_ww_deps: Annotated[
        bool, typer.Option("--no-ww-deps", help="Infer no write-write edges (G1c becomes bad).")
    ] = False,
    ignore: Annotated[
        list[str] | None, typer.Option("--ignore", help="Anomaly type never bad, e.g. unseen (repeatable).")
    ] = None,
    guarantee: Annotated[
        str | None, typer.Option("--guarantee", help="at-most-once, at-least-once, idempotent or exactly-once.")
    ] = None,
    shared_consumer: Annotated[
        bool, typer.Option("--shared-consumer", help="With subscribe, the consumers shared one server-side consumer "
                           "(JetStream's): gaps inside a poll are not bad. For a bare history; a run directory's "
                           "system says it.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results object as JSON.")] = False,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Check linearizability against a model instead: register or cas-register."),
    ] = None,
    max_memory: Annotated[str | None, typer.Option("--max-memory", help=_MAX_MEMORY_HELP)] = None,
) -> None:
    """Check a stored history; exit 0 valid, 1 invalid, 2 unknown, 3 unreadable input, 4 usage error.

    A run directory is checked as its run was (workload, sub-via, txn, guarantee from its
    test.json; flags override). HISTORY may also be a Jepsen history.edn or jepsen.log
    (e.g. with --model cas-register).
    """
    import json

    from logquake.checker import MODELS, CheckOptions, check_history, check_linearizable
    from logquake.checker.linear import summary_lines
    from logquake.checker.summary import render_summary
    from logquake.config import load_run_config
    from logquake.errors import ConfigError
    from logquake.guarantees import check_txn
    from logquake.history_import import load_any_history

    if model is not None and model not in MODELS:
        raise ConfigError("--model", f"unknown model {model!r}; expected one of {', '.join(sorted(MODELS))}")

    path = history / "history.jsonl" if history.is_dir() else history
    run_cfg = None
    if model is None and history.is_dir() and (history / "test.json").is_file():
        run_cfg = load_run_config(history, {"sub_via": sub_via, "txn": txn or None, "guarantee": guarantee,
                                            "ww_deps": False if no_ww_deps else None,
                                            "ignore": list(ignore) if ignore else None})
    # The pairs `run` refuses are refused here too, in its words (a flag or the run's test.json).
    check_txn(run_cfg.guarantee if run_cfg else guarantee, run_cfg.txn if run_cfg else txn)
    if shared_consumer and (run_cfg is not None or sub_via == "assign"):
        raise ConfigError("--shared-consumer", "a run directory's test.json says whether its consumers shared one"
                          if run_cfg is not None else "only subscribers share a consumer, not --sub-via assign")
    try:
        opts = CheckOptions(sub_via=sub_via or ("subscribe" if shared_consumer else "assign"), txn=txn,
                            ww_deps=not no_ww_deps, ignore=tuple(ignore or ()), guarantee=guarantee,
                            shared_consumer=shared_consumer)
    except ValueError as e:
        raise ConfigError("check", str(e)) from None
    streamed = False
    if max_memory is not None:
        from logquake.checker.memory import plan_check
        from logquake.history_import import detect_format

        limit = _max_memory(max_memory)
        if path.is_file():  # (a missing file is the reader's to report)
            # Only the queue analysis checks from the file (the linear and other checks need a list).
            queue = model is None and (run_cfg is None or run_cfg.workload == "queue")
            streamed = plan_check(path, limit, can_stream=queue and detect_format(path) == "jsonl").streamed
            if streamed:
                err_console.print("[dim]checking straight from the file (slower, bounded memory) to fit --max-memory[/]")
    if streamed:
        from logquake.checker.queue_stream import HistoryFile

        ops = HistoryFile(path)
    else:
        with err_console.status(f"reading {path}"):
            ops = load_any_history(path)
    with err_console.status(f"checking {path}" if streamed else f"checking {len(ops)} ops"):
        if model is not None:
            result = check_linearizable(ops, MODELS[model])
        elif run_cfg is not None:  # the runner's own choice of analysis for this workload
            from logquake.runner import check as runner_check
            from logquake.runner import with_drain, with_interruption

            # What the run's drain reached (and which brokers were down), and whether Ctrl-C cut
            # it short, qualify the verdict as they did when the run ended: only the run knew
            # them, so they come from results.json.
            stored = _stored_results(history)
            drain = stored.get("drain")
            result = with_interruption(with_drain(runner_check(ops, run_cfg), drain if isinstance(drain, dict) else None),
                                       interrupted=stored.get("interrupted") is True)
        else:
            result = check_history(ops, opts)
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    elif run_cfg is not None:  # as `logquake run` ends: its verdict table, a register explanation
        from logquake.display import verdict_table

        Console().print(verdict_table(result))
        if "linear" in result:
            Console().print("\n".join(summary_lines(result)), highlight=False, markup=False)
    elif model is not None:
        Console().print("\n".join(summary_lines(result)), highlight=False, markup=False)
    else:
        render_summary(result, Console(), title=str(path))
    raise typer.Exit({True: 0, False: 1}.get(result["valid"], 2))


def _stored_results(run_dir: Path) -> dict:
    """A run directory's results.json, or {} if there is none that can be read."""
    import json

    try:
        stored = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    max_memory: Annotated[str | None, typer.Option("--max-memory", help=_MAX_MEMORY_HELP)] = None,
) -> None:
    """Regenerate report.html for a run directory."""
    from logquake.results.report import write_report

    if max_memory is not None:
        from logquake.checker.memory import refuse_report

        limit = _max_memory(max_memory)
        if (run_dir / "history.jsonl").is_file():
            refuse_report(run_dir / "history.jsonl", limit)

    with err_console.status(f"reading {run_dir / 'history.jsonl'} and rendering the report"):
        out = write_report(run_dir)
    size = out.stat().st_size / 1e6
    typer.echo(f"wrote {out} ({size:.1f} MB)")
    if not (run_dir / "results.json").is_file():
        err_console.print("[yellow]no results.json: the report has no verdict and no anomalies[/]")


@app.command()
def serve(
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8080,
    results: Annotated[Path, typer.Option(help="Results directory.")] = Path("results"),
    host: Annotated[str, typer.Option(help="Address to bind; other than loopback exposes your runs.")] = "127.0.0.1",
) -> None:
    """Serve the results directory over HTTP (127.0.0.1 by default): runs, and each test's trend."""
    from logquake.errors import ConfigError, UserError
    from logquake.results.serve import make_server

    if not results.is_dir():
        raise ConfigError("--results", f"{results} is not a directory" if results.exists()
                          else f"no such directory: {results}")
    try:
        server = make_server(results, host=host, port=port)
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror}", hint="pick another --port") from None
    bound_host, bound_port = server.server_address[:2]
    try:
        # Inside the try: a Ctrl-C the moment the URL shows (a script waits for that line) stops it cleanly too.
        typer.echo(f"serving {results.absolute()} on http://{bound_host}:{bound_port}/ (Ctrl-C stops)", err=False)
        sys.stdout.flush()
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command()
def broker(
    node_id: Annotated[int, typer.Option("--node-id", help="This broker's node id.")],
    config: Annotated[Path, typer.Option("--config", help="Node config YAML.")],
) -> None:
    """Run one broker process of the embedded replicated log (stops cleanly on SIGTERM)."""
    from logquake.broker.process import run_broker

    code = run_broker(node_id, config)
    if code:
        raise typer.Exit(code)


test_all_app = typer.Typer(no_args_is_help=False, add_completion=False)
app.add_typer(test_all_app, name="test-all")


@test_all_app.callback(invoke_without_command=True)
def test_all(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option("--config", help="Matrix YAML (default: the built-in one).")] = None,
    test_count: Annotated[int | None, typer.Option(help="Seeded runs per cell (default 1).", min=1)] = None,
    time_limit: Annotated[float | None, typer.Option(help="Seconds of each run's main phase.")] = None,
    results_dir: Annotated[str, typer.Option(help="Where runs and results/test-all/<time>/ go.")] = "results",
    guarantee: Annotated[
        list[str] | None,
        typer.Option("--guarantee", help="Run every cell under each of these delivery guarantee profiles: "
                                         "at-most-once | at-least-once | idempotent | exactly-once (repeatable or "
                                         "comma-separated; replaces the matrix's `guarantees`)."),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Cells with a name part starting with this (`safe/txn` is not "
                                    "`unsafe/txn_markers`; a trailing `$` asks for the whole rest of the name; "
                                    "repeatable)."),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option("--shard", help="Run shard K of N (K/N, 1-based) of the (cell, seed) pairs, or `auto`: "
                                     "CI_NODE_INDEX/CI_NODE_TOTAL (GitLab `parallel:`) or JOB_COMPLETION_INDEX "
                                     "with LOGQUAKE_SHARD_TOTAL (Kubernetes Indexed Job). Join the shards with "
                                     "`logquake test-all merge`."),
    ] = None,
) -> None:
    """Run a matrix of workloads x nemeses x broker modes (docs/unsafe-modes.md).

    Writes index.json and junit.xml under results/test-all/<time>/ (a shard:
    <time>-shard-K-of-N/; profiles.html too when the matrix has several guarantee profiles).
    Exit 0 every run as expected, 1 a run invalid on the safe broker or an unsafe mode not
    caught, 2 a run whose verdict is unknown or that could not run, 3 a bad matrix, 4 a usage error.
    `logquake test-all merge DIR...` joins shards (docs/ci.md).
    """
    if ctx.invoked_subcommand is not None:
        return
    from logquake.matrix import parse_shard
    from logquake.matrix_display import run_with_display

    part = parse_shard(shard)
    raise typer.Exit(run_with_display(config, test_count=test_count, time_limit=time_limit,
                                      results_dir=results_dir, console=Console(), guarantees=guarantee,
                                      only=only, shard=part))


@test_all_app.command("merge")
def test_all_merge(
    dirs: Annotated[list[Path], typer.Argument(help="Shards' results directories, test-all/<time>/ directories "
                                                     "or index.json files.")],
    out: Annotated[Path | None, typer.Option("--out", help="Where the joined index.json and junit.xml go "
                                                            "(default <results-dir>/test-all/<time>-merged/).")
                   ] = None,
    results_dir: Annotated[str, typer.Option(help="Default parent of --out.")] = "results",
) -> None:
    """Join the shards of one test-all into one index.json, junit.xml, table and exit code.

    Refuses shards of different matrices (another matrix, --only, --test-count, --time-limit,
    --guarantee or seed). A pair whose shard is missing or stopped early is an error run.
    Exit codes as test-all's.
    """
    from logquake.matrix_display import merge_with_display

    raise typer.Exit(merge_with_display(dirs, out_dir=out, results_dir=results_dir, console=Console()))


@cluster_app.command("up")
def cluster_up(
    nodes: Annotated[int, typer.Option(help="Number of nodes.", min=1, max=15)] = 5,
    dir: Annotated[Path | None, typer.Option("--dir", help="Node directories (default: a new temp dir).")] = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the brokers (0: don't).")] = 30.0,
) -> None:
    """Start a lab cluster (nodes in network namespaces, a broker each); print its bootstrap servers."""
    from logquake.cluster.commands import cluster_up as up

    up(nodes=nodes, run_dir=dir, wait=wait, console=err_console)


@cluster_app.command("status")
def cluster_status(
    id: Annotated[str | None, typer.Option("--id", help="One cluster (default: all).")] = None,
) -> None:
    """Show lab clusters: node, address, pid, up, leader of which partitions."""
    from rich.console import Console

    from logquake.cluster.commands import cluster_status as status

    status(cluster_id=id, console=Console())


@cluster_app.command("down")
def cluster_down(
    id: Annotated[str | None, typer.Option("--id", help="One cluster (default: all of yours not in use).")] = None,
    all: Annotated[bool, typer.Option("--all", help="Also clusters of runs still in progress.")] = False,
) -> None:
    """Tear lab clusters down (also what a killed run left), leaving nothing behind."""
    from rich.console import Console

    from logquake.cluster.commands import cluster_down as down

    down(cluster_id=id, everything=all, console=Console())


def report_error(e: LogquakeError) -> None:
    """Print a user-facing error the one way logquake does it."""
    # soft_wrap: one error is one line, also when stderr is not a terminal (CI logs, grep).
    err_console.print(f"[bold red]{type(e).__name__}:[/] {e}", highlight=False, soft_wrap=True)
    if e.hint:
        err_console.print(f"[red]hint:[/] {e.hint}", highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `logquake` script."""
    from typer import Abort
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    try:
        code = app(args=argv, prog_name="logquake", standalone_mode=False)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except NoArgsIsHelpError as e:
        e.show()
        return EXIT_USAGE
    except ClickException as e:  # a usage error (`--seed abc`, `--nodez 3`): not a verdict's code
        from typer import rich_utils

        rich_utils.rich_format_error(e)
        return EXIT_USAGE if isinstance(e, UsageError) else e.exit_code
    except Abort:
        err_console.print("Aborted!")
        return 130
    except LogquakeError as e:
        report_error(e)
        return EXIT_USER_ERROR
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
