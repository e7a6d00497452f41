"""`python -m logquake.broker --node-id N --config node.yaml`: `logquake broker` without the CLI's
start-up cost (typer, rich); LocalCluster uses it so a fresh cluster is up sooner."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from logquake.broker.process import run_broker
from logquake.errors import LogquakeError


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m logquake.broker")
    ap.add_argument("--node-id", type=int, required=True)
    ap.add_argument("--config", type=Path, required=True)
    args = ap.parse_args()
    try:
        return run_broker(args.node_id, args.config)
    except LogquakeError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
