"""The `docker` backend: one container per node on a user network with fixed addresses.

Containers get NET_ADMIN (the nemesis's iptables runs inside them) and the harness's source
tree, venv and interpreter bind-mounted read-only at the same paths (see docker/Dockerfile),
so the lifecycle runs the broker there exactly as in the lab. Every container and network
carries the label `org.logquake.cluster=<id>`; teardown removes them by it, and the next
docker cluster removes those whose harness died without teardown (label `org.logquake.owner`).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
import sys
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from logquake.cluster.cluster import NodeCluster, node_names
from logquake.cluster.host import (
    ExecResult,
    run_checked,
    shell_join,
    signal_by_kill,
    spawn_by_shell,
)
from logquake.cluster.remote import detect_iptables
from logquake.config import TestConfig
from logquake.errors import ConfigError, HostError, MissingPrerequisite
from logquake.systems.base import NodeNeeds, NodeSetup, NodeSpec, System

__all__ = ["DockerHost", "open_docker", "docker_client", "build_image", "remove_docker_cluster", "reap_orphans", "IMAGE", "LABEL"]

log = logging.getLogger(__name__)

IMAGE = "logquake-node:latest"
BASE_IMAGE = "logquake-base:bookworm"
LABEL = "org.logquake.cluster"
OWNER = "org.logquake.owner"
DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
NODE_DIR = "/var/lib/logquake"


def docker_client():
    """A client of the local dockerd, or MissingPrerequisite saying how to get one."""
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception as e:
        raise MissingPrerequisite(f"cannot reach dockerd: {e}",
                                  hint="start it with scripts/start-dockerd.sh (installs need docker.io)") from None


class DockerHost:
    """A node in a container, driven through `docker exec` (the SDK's exec API)."""

    def __init__(self, name: str, container: str, *, client=None) -> None:
        self.name = name
        self.container = container
        self._client = client

    @property
    def api(self):
        if self._client is None:
            self._client = docker_client()
        return self._client.api

    def exec(self, argv: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> ExecResult:
        env = {}
        cmd = ["timeout", "-k", "2", str(max(1, int(timeout))), *map(str, argv)]
        if input is not None:  # the exec API has no simple stdin; small inputs travel in the environment
            env["LQ_STDIN"] = input
            cmd = ["sh", "-c", 'printf %s "$LQ_STDIN" | "$@"', "sh", *cmd]
        try:
            ex = self.api.exec_create(self.container, cmd, environment=env, stdout=True, stderr=True)
            out, err = self.api.exec_start(ex["Id"], demux=True)
            rc = self.api.exec_inspect(ex["Id"])["ExitCode"]
        except Exception as e:
            raise HostError(self.name, shell_join(argv), -1, f"docker exec failed: {e}") from None
        text = err.decode(errors="replace") if err else ""
        if rc == 124:
            text += f"\ntimed out after {timeout}s"
        return ExecResult(rc if rc is not None else -1, out.decode(errors="replace") if out else "", text)

    def put(self, local: str, remote: str) -> None:
        run_checked(self, ["mkdir", "-p", os.path.dirname(remote)])
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(local, arcname=os.path.basename(remote))
        if not self.api.put_archive(self.container, os.path.dirname(remote), buf.getvalue()):
            raise HostError(self.name, f"put {remote}", -1, "put_archive refused")

    def get(self, remote: str, local: str) -> None:
        import docker.errors

        try:
            stream, _ = self.api.get_archive(self.container, remote)
            data = b"".join(stream)
        except docker.errors.NotFound:
            raise FileNotFoundError(f"{self.name}:{remote}") from None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            f = tar.extractfile(member) if member is not None else None
            if f is None:
                raise FileNotFoundError(f"{self.name}:{remote} is not a regular file")
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            Path(local).write_bytes(f.read())

    def spawn(self, argv: Sequence[str], *, pidfile: str, logfile: str, env: Mapping[str, str] = {}) -> int:
        return spawn_by_shell(self, argv, pidfile=pidfile, logfile=logfile, env=env)

    def signal(self, pid: int, sig: int) -> None:
        signal_by_kill(self, pid, sig)


# -- image ---------------------------------------------------------------------------------


def build_image(client, *, tag: str = IMAGE) -> str:
    """Build docker/Dockerfile on the offline base (made by build-base-image.sh when missing)."""
    import subprocess

    import docker.errors

    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(tag)
        return tag
    if not _has_image(client, BASE_IMAGE):
        log.warning("no %s: making it with debootstrap (a few minutes)", BASE_IMAGE)
        p = subprocess.run([str(DOCKER_DIR / "build-base-image.sh"), BASE_IMAGE], capture_output=True, text=True)
        if p.returncode != 0:
            raise MissingPrerequisite(f"building the base image failed: {p.stderr.strip()[-500:]}",
                                      hint="run docker/build-base-image.sh by hand (needs debootstrap and root)")
    try:
        client.images.build(path=str(DOCKER_DIR), tag=tag, buildargs={"BASE": BASE_IMAGE}, network_mode="host",
                            rm=True)
    except docker.errors.BuildError as e:
        lines = [str(x.get("stream", x.get("error", ""))).strip() for x in e.build_log]
        raise MissingPrerequisite(f"building {tag} failed: {' | '.join(lines[-5:])}") from None
    return tag


def _has_image(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


# -- cluster -------------------------------------------------------------------------------


def _mounts() -> dict[str, dict[str, str]]:
    """The harness's source tree, venv and interpreter, read-only at the same paths."""
    paths = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
             Path(os.path.realpath(sys.executable)).parent.parent}
    keep = [p for p in sorted(paths) if not any(q != p and q in p.parents for q in paths)]
    return {str(p): {"bind": str(p), "mode": "ro"} for p in keep}


def _pick_subnet(client) -> ipaddress.IPv4Network:
    used = set()
    for net in client.api.networks():
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(ValueError, KeyError):
                used.add(ipaddress.ip_network(cfg["Subnet"]))
    import random

    for k in random.SystemRandom().sample(range(1, 255), 254):
        cand = ipaddress.ip_network(f"10.78.{k}.0/24")
        if not any(cand.overlaps(u) for u in used):
            return cand
    raise MissingPrerequisite("no free 10.78.k.0/24 subnet for a docker network")


def remove_docker_cluster(client, cluster_id: str) -> list[str]:
    """Remove the containers and network labelled with cluster_id; returns what could not be removed."""
    problems = []
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}={cluster_id}"}):
        try:
            c.remove(force=True)
        except Exception as e:
            problems.append(f"container {c.name}: {e}")
    for n in client.networks.list(filters={"label": f"{LABEL}={cluster_id}"}):
        try:
            n.remove()
        except Exception as e:
            problems.append(f"network {n.name}: {e}")
    return problems


def _owner() -> str:
    import psutil

    return f"{os.getpid()}:{psutil.Process().create_time():.2f}"


def _owner_alive(owner: str) -> bool:
    import psutil

    pid, _, created = owner.partition(":")
    try:
        return f"{psutil.Process(int(pid)).create_time():.2f}" == created
    except (psutil.Error, ValueError):
        return False


def reap_orphans(client) -> list[str]:
    """Remove docker clusters whose harness is gone (SIGKILLed before its teardown); their ids."""
    owners = {}
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        owners.setdefault(c.labels.get(LABEL, ""), c.labels.get(OWNER, ""))
    dead = [cid for cid, owner in owners.items() if cid and not _owner_alive(owner)]
    for cid in dead:
        log.warning("removing docker cluster %s left by a harness that died", cid)
        _remove(client, cid)
    return dead


def _make_nodes(client, cid: str, names: Sequence[str], image: str) -> tuple[dict[str, str], str]:
    """Network and containers; returns ({node: address}, the harness's address on the bridge)."""
    import docker.types

    subnet = _pick_subnet(client)
    gateway = str(subnet.network_address + 1)
    net = f"lq-{cid}"
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)])
    labels = {LABEL: cid, OWNER: _owner()}
    client.networks.create(net, driver="bridge", ipam=ipam, labels=labels,
                           options={"com.docker.network.bridge.name": f"lq{cid}"})
    addresses = {}
    api = client.api
    for i, name in enumerate(names):
        addr = str(subnet.network_address + 11 + i)
        host_config = api.create_host_config(cap_add=["NET_ADMIN"], binds=_mounts(), network_mode=net, init=True)
        netcfg = api.create_networking_config({net: api.create_endpoint_config(ipv4_address=addr)})
        c = api.create_container(image, command=["sleep", "infinity"], name=f"lq-{cid}-{name}", hostname=name,
                                 labels=labels, host_config=host_config, networking_config=netcfg)
        api.start(c["Id"])
        addresses[name] = addr
    return addresses, gateway


def open_docker(cfg: TestConfig, run_dir: Path, system: System, needs: NodeNeeds, *,
                start: bool = True) -> NodeCluster:
    """cfg.nodes containers running the system; removed again when the cluster closes."""
    if cfg.hosts:
        raise ConfigError("hosts", "the docker backend makes its own containers; hosts is for ssh and external")
    client = docker_client()
    image = build_image(client)
    reap_orphans(client)
    cid = os.urandom(3).hex()
    names = node_names(cfg.nodes)
    needs = NodeNeeds(faketime=needs.faketime)  # no FUSE in the containers; corrupt-tail covers disk faults
    try:
        addresses, gateway = _make_nodes(client, cid, names, image)
        hosts = {n: DockerHost(n, f"lq-{cid}-{n}", client=client) for n in names}
        specs = tuple(NodeSpec(name=n, node_id=i, address=addresses[n], node_dir=f"{NODE_DIR}/{n}",
                               client_port=system.client_port, peer_port=system.peer_port)
                      for i, n in enumerate(names, start=1))
        # The harness's interpreter: its tree is mounted at the same paths in every container.
        setup = NodeSetup(hosts=hosts, specs=specs, needs=needs, python=sys.executable, cfg=cfg)
        cluster = NodeCluster(system=system, hosts=hosts, lifecycle=system.make_lifecycle(setup), specs=specs,
                              needs=needs, bootstrap=system.bootstrap(specs, cfg), run_dir=str(run_dir),
                              python=sys.executable, iptables=detect_iptables(hosts[names[0]]),
                              harness_address=gateway, on_close=lambda: _remove(client, cid))
        cluster.install_all()
        if start:
            cluster.start_all()
    except BaseException:
        _remove(client, cid)
        raise
    return cluster


def _remove(client, cid: str) -> None:
    problems = remove_docker_cluster(client, cid)
    if problems:
        log.warning("docker teardown left: %s", "; ".join(problems))
