"""What the docker and ssh backends do on hosts logquake did not build: find iptables, ship logquake.

`install_logquake` ships logquake to an ssh node as Jepsen ships a database: a tarball of this
package, unpacked into the node's directory and run by a small wrapper with the node's own Python.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

import logquake
from logquake.cluster.host import Host, run_checked

__all__ = ["detect_iptables", "install_logquake"]


def detect_iptables(host: Host) -> str:
    """The first iptables flavour that works on the node (nft before legacy, as the lab)."""
    for tool in ("iptables-nft", "iptables", "iptables-legacy"):
        if host.exec([tool, "-w", "-S", "INPUT"], timeout=30).rc == 0:
            return tool
    return "iptables"


def _source_tarball() -> bytes:
    root = Path(logquake.__file__).parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(root, arcname="logquake", filter=lambda t: None if "__pycache__" in t.name else t)
    return buf.getvalue()


WRAPPER = """#!/bin/sh
# logquake as uploaded by the harness, run with this node's Python ({python}).
PKG={pkg}
# Under clock faults the shim goes in front of whatever PYTHONPATH the broker inherits.
if [ -n "$FAKETIME_TIMESTAMP_FILE" ]; then PYTHONPATH="$PKG/logquake/cluster/faketime_site${{PYTHONPATH:+:$PYTHONPATH}}"; fi
PYTHONPATH="$PKG${{PYTHONPATH:+:$PYTHONPATH}}" exec {python} "$@"
"""


def install_logquake(host: Host, node_dir: str, python: str) -> str:
    """Upload this logquake to node_dir/pkg; returns the wrapper to use as the broker's interpreter."""
    pkg = f"{node_dir}/pkg"
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "logquake.tar.gz"
        tarball.write_bytes(_source_tarball())
        host.put(str(tarball), f"{node_dir}/logquake.tar.gz")
        wrapper = Path(tmp) / "python"
        wrapper.write_text(WRAPPER.format(python=python, pkg=pkg))
        host.put(str(wrapper), f"{node_dir}/bin/python")
    run_checked(host, ["sh", "-c", 'rm -rf "$1" && mkdir -p "$1" && tar -xzf "$2" -C "$1" && chmod 755 "$3"',
                       "sh", pkg, f"{node_dir}/logquake.tar.gz", f"{node_dir}/bin/python"], timeout=120)
    rc, out, err = host.exec([f"{node_dir}/bin/python", "-c", "import logquake.broker, yaml; print('ok')"], timeout=120)
    if rc != 0 or "ok" not in out:
        from logquake.errors import MissingPrerequisite

        raise MissingPrerequisite(f"{host.name}: {python} cannot run the uploaded broker: {err.strip()[-300:]}",
                                  hint="install python3 with logquake's dependencies on the node "
                                       "(or point hosts[].python at a venv that has them)")
    return f"{node_dir}/bin/python"
