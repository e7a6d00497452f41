"""Consumer groups with real clients (kafka-python, confluent-kafka) on a real 3-node cluster.

Groups of three members that come and go consume every message, committing after
processing; committed offsets survive the loss of the coordinator's node; and the wire
answers of the group protocol (generations, unknown members, rebalances) are Kafka's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest

from logquake.broker import LocalCluster
from logquake.broker.coordination import OFFSETS_TOPIC, coordinator_partition
from logquake.broker.localcluster import kafka_request

JOIN_GROUP = 11


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def produce_spread(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Produce values round-robin over the partitions (acks=all), failing on any error."""
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions,
                  on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and errors == [], errors[:3]


@pytest.fixture(scope="module")
def gcluster(cluster: LocalCluster) -> LocalCluster:
    """The module's cluster (conftest.py), once it lists the group APIs."""
    keys = {k.api_key for k in kafka_request(*cluster.address(1), ApiVersionsRequest[0]()).api_keys}
    assert JOIN_GROUP in keys, "ApiVersions does not list the group APIs"
    return cluster


class Members:
    """Consumer threads of one group, recording what each processed and which commits failed."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.uncommitted: list[bytes] = []  # processed, then the commit failed: may come again
        self.lock = threading.Lock()
        self.threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.errors: list[BaseException] = []

    def start(self, name: str, loop: Callable[[threading.Event, Members], None]) -> None:
        stop = threading.Event()

        def run() -> None:
            try:
                loop(stop, self)
            except BaseException as e:  # noqa: BLE001 - surfaced by the test
                self.errors.append(e)

        t = threading.Thread(target=run, name=name, daemon=True)
        self.threads[name] = (t, stop)
        t.start()

    def stop(self, name: str) -> None:
        t, stop = self.threads.pop(name)
        stop.set()
        t.join(60)
        assert not t.is_alive(), f"{name} did not stop"

    def record(self, values: list[bytes], committed: bool) -> None:
        with self.lock:
            self.seen.extend(values)
            if not committed:
                self.uncommitted.extend(values)

    def distinct(self) -> int:
        with self.lock:
            return len(set(self.seen))


def kafka_python_member(bootstrap: str, topic: str, group: str) -> Callable[[threading.Event, Members], None]:
    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError, KafkaError

    def loop(stop: threading.Event, members: Members) -> None:
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=False, session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                          max_poll_records=20)
        try:
            while not stop.is_set():
                batch = c.poll(timeout_ms=300)
                values = [m.value for msgs in batch.values() for m in msgs]
                if values:
                    try:
                        c.commit()
                        members.record(values, True)
                    except (CommitFailedError, KafkaError):
                        members.record(values, False)
        finally:
            c.close()

    return loop


def confluent_member(bootstrap: str, topic: str, group: str) -> Callable[[threading.Event, Members], None]:
    from confluent_kafka import Consumer, KafkaException

    def loop(stop: threading.Event, members: Members) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000})
        c.subscribe([topic])
        try:
            while not stop.is_set():
                values = [m.value() for m in c.consume(20, 0.3) if m.error() is None]
                if values:
                    try:
                        c.commit(asynchronous=False)
                        members.record(values, True)
                    except KafkaException:
                        members.record(values, False)
        finally:
            c.close()

    return loop


class GroupRun:
    """One group's run: a topic of three partitions, members made with one client library,
    and every value produced so far."""

    def __init__(self, cluster: LocalCluster, client: str, name: str) -> None:
        self.cluster = cluster
        self.topic, self.group = f"grp-{name}", f"group-{name}"
        cluster.create_topic(self.topic, partitions=3)
        self.make = kafka_python_member if client == "kafka-python" else confluent_member
        self.members = Members()
        self.values: list[bytes] = []

    def produce(self, n: int) -> None:
        new = [f"{self.topic}-{len(self.values) + i}".encode() for i in range(n)]
        produce_spread(self.cluster.bootstrap_servers, self.topic, new, 3)
        self.values.extend(new)

    def start(self, name: str) -> None:
        self.members.start(name, self.make(self.cluster.bootstrap_servers, self.topic, self.group))

    def consumed_all(self) -> bool:
        return self.members.distinct() == len(self.values)

    def check(self) -> None:
        """Every value consumed, and only values whose commit failed consumed twice."""
        assert self.members.errors == []
        assert set(self.members.seen) == set(self.values)
        twice = {v for v, n in Counter(self.members.seen).items() if n > 1}
        assert twice <= set(self.members.uncommitted), "a value committed as processed was delivered again"


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_group_of_three_consumes_every_message_once(gcluster: LocalCluster, client: str) -> None:
    run = GroupRun(gcluster, client, client)
    run.produce(150)
    run.start("a")
    wait_until(lambda: run.members.distinct() >= 20, 120, "the first member to consume")
    run.start("b")  # rebalance: a shares with b
    run.start("c")
    run.produce(150)
    wait_until(run.consumed_all, 180, "the group to consume everything")
    run.members.stop("a")  # rebalance: b and c take over a's partitions
    run.produce(150)
    wait_until(run.consumed_all, 180, "the remaining members to consume everything")
    run.members.stop("b")
    run.members.stop("c")
    run.check()


def test_committed_offsets_survive_coordinator_failover(gcluster: LocalCluster) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group = "failover-offsets", "failover-group"
    gcluster.create_topic(topic, partitions=1)
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=gcluster.bootstrap_servers, group_id=group, enable_auto_commit=False)
    c.assign([tp])
    c.commit({tp: OffsetAndMetadata(7, "before", -1)})
    assert c.committed(tp) == 7
    c.close()
    coordinator = gcluster.leader(OFFSETS_TOPIC, coordinator_partition(group))
    gcluster.kill(coordinator)
    try:
        others = [n for n in (1, 2, 3) if n != coordinator]
        bootstrap = ",".join("{}:{}".format(*gcluster.address(n)) for n in others)
        got: list[int | None] = []

        def fetched() -> bool:
            d = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                              request_timeout_ms=5_000)
            try:
                got.append(d.committed(tp))
            except Exception:  # noqa: BLE001 - coordinator moving: ask again
                return False
            finally:
                d.close()
            return got[-1] is not None

        wait_until(fetched, 90, "a new coordinator to answer OffsetFetch")
        assert got[-1] == 7
    finally:
        gcluster.start(coordinator)
        gcluster.wait_ready(timeout=60)


def _coordinator_address(c: LocalCluster, group: str) -> tuple[str, int]:
    def found() -> bool:
        r = kafka_request(*c.address(1), FindCoordinatorRequest[1](key=group, key_type=0))
        result.append(r)
        return r.error_code == 0

    result: list = []
    wait_until(found, 60, "FindCoordinator")
    return result[-1].host, result[-1].port


def test_wire_generations_and_members(gcluster: LocalCluster) -> None:
    group = "wire-group"
    addr = _coordinator_address(gcluster, group)
    join = JoinGroupRequest[5](group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                               group_instance_id=None, protocol_type="consumer",
                               protocols=[JoinGroupRequest[5].JoinGroupRequestProtocol(name="range", metadata=b"x")])
    r = kafka_request(*addr, join, timeout=30)  # the initial rebalance delay passes first
    assert (r.error_code, r.generation_id, r.leader) == (0, r.generation_id, r.member_id)
    me, gen = r.member_id, r.generation_id
    assert [m.member_id for m in r.members] == [me]

    def heartbeat(member: str, generation: int) -> int:
        return kafka_request(*addr, HeartbeatRequest[3](group_id=group, generation_id=generation, member_id=member,
                                                        group_instance_id=None)).error_code

    assert heartbeat(me, gen) == 0  # CompletingRebalance: heartbeats are fine
    sync = SyncGroupRequest[3](group_id=group, generation_id=gen, member_id=me, group_instance_id=None,
                               assignments=[SyncGroupRequest[3].SyncGroupRequestAssignment(member_id=me,
                                                                                          assignment=b"mine")])
    s = kafka_request(*addr, sync)
    assert (s.error_code, s.assignment) == (0, b"mine")
    assert heartbeat(me, gen) == 0
    assert heartbeat(me, gen - 1) == 22  # ILLEGAL_GENERATION
    assert heartbeat("nobody", gen) == 25  # UNKNOWN_MEMBER_ID


@pytest.mark.slow
@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_group_keeps_consuming_when_its_coordinator_dies(gcluster: LocalCluster, client: str) -> None:
    run = GroupRun(gcluster, client, f"fo-{client}")
    run.produce(300)
    for name in "abc":
        run.start(name)
    wait_until(run.consumed_all, 180, "the group to consume the first part")
    coordinator = gcluster.leader(OFFSETS_TOPIC, coordinator_partition(run.group))
    gcluster.kill(coordinator)
    try:
        run.produce(300)
        wait_until(run.consumed_all, 240, "the group to go on under a new coordinator")
        for name in "abc":
            run.members.stop(name)
    finally:
        gcluster.start(coordinator)
        gcluster.wait_ready(timeout=60)
    run.check()


@pytest.mark.slow
def test_session_timeout_hands_a_killed_members_partitions_over(gcluster: LocalCluster) -> None:
    import os
    import select
    import signal
    import subprocess
    import sys

    topic, group = "grp-session", "group-session"
    gcluster.create_topic(topic, partitions=2)
    values = [f"s-{i}".encode() for i in range(200)]
    produce_spread(gcluster.bootstrap_servers, topic, values, 2)
    # A member in its own process that never commits, SIGKILLed later: it never sends LeaveGroup.
    script = (
        "import sys\n"
        "from confluent_kafka import Consumer\n"
        "c = Consumer({'bootstrap.servers': sys.argv[1], 'group.id': sys.argv[2], 'session.timeout.ms': 6000,"
        " 'heartbeat.interval.ms': 500, 'auto.offset.reset': 'earliest', 'enable.auto.commit': False})\n"
        "c.subscribe([sys.argv[3]])\n"
        "while True:\n"
        "    for m in c.consume(10, 0.2):\n"
        "        if m.error() is None:\n"
        "            print('got', flush=True)\n"
    )
    doomed = subprocess.Popen([sys.executable, "-c", script, gcluster.bootstrap_servers, group, topic],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    members = Members()
    try:
        ready, _, _ = select.select([doomed.stdout], [], [], 120)
        assert ready and doomed.stdout.readline().startswith("got"), "the doomed member never consumed"
        members.start("survivor", confluent_member(gcluster.bootstrap_servers, topic, group))
        wait_until(lambda: members.distinct() > 0, 120, "the survivor to get a partition")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(30)
        more = [f"s-{i}".encode() for i in range(200, 400)]
        produce_spread(gcluster.bootstrap_servers, topic, more, 2)
        # After the session timeout the survivor owns both partitions; nothing was committed
        # for the dead member's partition, so it reads that one from the beginning.
        wait_until(lambda: set(values + more) <= set(members.seen), 120, "the survivor to take both partitions over")
        members.stop("survivor")
    finally:
        if doomed.poll() is None:
            os.killpg(doomed.pid, signal.SIGKILL)
        for name in list(members.threads):
            members.stop(name)
    assert members.errors == []
