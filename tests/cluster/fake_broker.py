"""A stand-in for `python -m logquake.broker` made of simple real behaviour, for lifecycle and fault
tests that must not depend on the broker: it reads node.yaml, listens on its kafka port,
writes its wall clock and a counter to files, and appends numbered lines to a segment file
in data_dir, fsyncing every 5th line and recording the last fsynced line number.

Invoked through a wrapper that stands in for the python interpreter: `-m logquake.broker ...`
runs this; anything else (e.g. `-m logquake.nemesis.disktool`) runs the real interpreter.
"""

import os
import socket
import sys
import threading
import time

import yaml


def main() -> None:
    cfg = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
    me = next(n for n in cfg["nodes"] if n["node_id"] == cfg["node_id"])
    node_dir = os.path.dirname(cfg["log_file"])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((me["host"], me["kafka_port"]))
    srv.listen(64)
    threading.Thread(target=lambda: [srv.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()
    seg_dir = os.path.join(cfg["data_dir"], "topic-0")
    os.makedirs(seg_dir, exist_ok=True)
    seg = open(os.path.join(seg_dir, "00000000000000000001.seg"), "ab")
    i = 0
    while True:
        i += 1
        seg.write(b"%08d\n" % i)
        seg.flush()
        if i % 5 == 0:
            os.fsync(seg.fileno())
            _atomic(os.path.join(node_dir, "synced"), str(i))
        _atomic(os.path.join(node_dir, "clock"), f"{time.time():.3f} {i}")
        time.sleep(0.02)


def _atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
