"""Run as an unprivileged user by test_unprivileged.py: a lab with a partition, from inside a user namespace."""

import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.labkit import connect_matrix, lab, start_listeners  # noqa: E402
from logquake.cluster.userns import in_private_userns  # noqa: E402
from logquake.nemesis import Net, cut_links, make_grudge  # noqa: E402

base = Path(sys.argv[1])
uid = os.getuid()
with lab(3, base) as (state, hosts):
    start_listeners(state, hosts, base / "listeners")
    net = Net(hosts, state.addresses, iptables=state.iptables)
    grudge = make_grudge("one", sorted(hosts), random.Random(3))
    net.drop(grudge)
    cut = connect_matrix(state, hosts)
    net.heal()
    healed = connect_matrix(state, hosts)
    print(json.dumps({
        "real_uid": uid, "mode": state.mode, "userns": in_private_userns(), "veth": state.harness_veth,
        "cut": sorted(map(sorted, cut)), "expected": sorted(map(sorted, cut_links(grudge))),
        "healed": sorted(map(sorted, healed)), "iptables": state.iptables,
    }))
