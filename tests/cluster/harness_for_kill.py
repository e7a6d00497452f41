"""A harness to be SIGKILLed by a test: builds a fake cluster with LazyFS and a partition, then waits."""

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.labkit import fake_cluster  # noqa: E402
from logquake.nemesis import Net, make_grudge  # noqa: E402

base = Path(sys.argv[1])
with fake_cluster(3, base, lazyfs=True) as c:
    Net(c.hosts, c.addresses, iptables=c.state.iptables).drop(make_grudge("one", c.nodes, random.Random(1)))
    lc = c.lifecycle
    pids = [lc.pid(n) for n in c.nodes] + [lc.pid(n, "lazyfs.pid") for n in c.nodes]
    pids += [r.pid for r in c.state.holders.values()] + [c.state.switch.pid]
    print(json.dumps({"id": c.state.cluster_id, "veth": c.state.harness_veth, "pids": pids}), flush=True)
    time.sleep(3600)
