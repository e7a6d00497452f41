"""The Kafka APIs this broker serves: the one table of what each API key means here.

For every API key `APIS` holds the version range advertised by ApiVersions (docs/architecture.md
ranges, one contiguous range per API), kafka-python's request and response schemas, and the
handler that answers it. The codec decodes only what the table lists, ApiVersions and the
too-new-ApiVersions error answer list exactly its ranges, and a node dispatches each request
to the handler the table names (`bind`), so the three cannot drift apart.

Handlers are named as functions of a node's `Services` (its core, group and transaction
handler objects): the table stays plain data made at import, and each node binds it to its
own services when it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from logquake.broker.codec import Request
    from logquake.broker.handlers import KafkaApi
    from logquake.broker.handlers_groups import GroupService
    from logquake.broker.handlers_txn import TxnService

__all__ = ["APIS", "Api", "ApiKey", "Handler", "Services", "bind", "response", "version_entries"]

Handler = Callable[["Request"], Any]
"""Answers one request: a response, `server.NO_RESPONSE`, or an awaitable of one of them."""


class ApiKey:
    """The Kafka API keys this broker speaks."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28


@dataclass(frozen=True, kw_only=True)
class Services:
    """The objects whose methods answer requests on one node."""

    core: KafkaApi  # produce, fetch, metadata, topics, idempotent producer ids
    groups: GroupService  # consumer groups and their committed offsets
    txn: TxnService  # transaction coordinators and markers


@dataclass(frozen=True, kw_only=True, slots=True)
class Api:
    """One API: its advertised versions, kafka-python schemas, and the handler answering it."""

    min_version: int
    max_version: int
    request: Any  # the kafka-python request class (indexed by version)
    response: Any  # the kafka-python response class (indexed by version)
    handler: Callable[[Services], Handler]  # picks the method of a node's services


APIS: dict[int, Api] = {
    ApiKey.PRODUCE: Api(min_version=3, max_version=9, request=ProduceRequest, response=ProduceResponse,
                        handler=lambda s: s.core.produce),
    ApiKey.FETCH: Api(min_version=4, max_version=12, request=FetchRequest, response=FetchResponse,
                      handler=lambda s: s.core.fetch),
    ApiKey.LIST_OFFSETS: Api(min_version=1, max_version=7, request=ListOffsetsRequest,
                             response=ListOffsetsResponse, handler=lambda s: s.core.list_offsets),
    ApiKey.METADATA: Api(min_version=0, max_version=12, request=MetadataRequest, response=MetadataResponse,
                         handler=lambda s: s.core.metadata),
    ApiKey.OFFSET_COMMIT: Api(min_version=2, max_version=8, request=OffsetCommitRequest,
                              response=OffsetCommitResponse, handler=lambda s: s.groups.offset_commit),
    ApiKey.OFFSET_FETCH: Api(min_version=1, max_version=7, request=OffsetFetchRequest,
                             response=OffsetFetchResponse, handler=lambda s: s.groups.offset_fetch),
    ApiKey.FIND_COORDINATOR: Api(min_version=0, max_version=4, request=FindCoordinatorRequest,
                                 response=FindCoordinatorResponse, handler=lambda s: s.groups.find_coordinator),
    ApiKey.JOIN_GROUP: Api(min_version=0, max_version=7, request=JoinGroupRequest, response=JoinGroupResponse,
                           handler=lambda s: s.groups.join_group),
    ApiKey.HEARTBEAT: Api(min_version=0, max_version=4, request=HeartbeatRequest, response=HeartbeatResponse,
                          handler=lambda s: s.groups.heartbeat),
    ApiKey.LEAVE_GROUP: Api(min_version=0, max_version=4, request=LeaveGroupRequest, response=LeaveGroupResponse,
                            handler=lambda s: s.groups.leave_group),
    ApiKey.SYNC_GROUP: Api(min_version=0, max_version=5, request=SyncGroupRequest, response=SyncGroupResponse,
                           handler=lambda s: s.groups.sync_group),
    ApiKey.API_VERSIONS: Api(min_version=0, max_version=3, request=ApiVersionsRequest,
                             response=ApiVersionsResponse, handler=lambda s: s.core.api_versions),
    ApiKey.CREATE_TOPICS: Api(min_version=2, max_version=5, request=CreateTopicsRequest,
                              response=CreateTopicsResponse, handler=lambda s: s.core.create_topics),
    # Transactional ids go to their coordinator, the others to the core (idempotent producers).
    ApiKey.INIT_PRODUCER_ID: Api(min_version=0, max_version=4, request=InitProducerIdRequest,
                                 response=InitProducerIdResponse, handler=lambda s: s.txn.init_producer_id),
    # Not one a client must have, but kafka-python consumers (KIP-320) stall after a leader change
    # without it; 2-4 is the range of the upstream schema.
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Api(min_version=2, max_version=4, request=OffsetForLeaderEpochRequest,
                                        response=OffsetForLeaderEpochResponse,
                                        handler=lambda s: s.core.offset_for_leader_epoch),
    ApiKey.ADD_PARTITIONS_TO_TXN: Api(min_version=0, max_version=3, request=AddPartitionsToTxnRequest,
                                      response=AddPartitionsToTxnResponse,
                                      handler=lambda s: s.txn.add_partitions_to_txn),
    ApiKey.ADD_OFFSETS_TO_TXN: Api(min_version=0, max_version=3, request=AddOffsetsToTxnRequest,
                                   response=AddOffsetsToTxnResponse, handler=lambda s: s.txn.add_offsets_to_txn),
    ApiKey.END_TXN: Api(min_version=0, max_version=3, request=EndTxnRequest, response=EndTxnResponse,
                        handler=lambda s: s.txn.end_txn),
    # Broker to broker only: the transaction coordinator's markers to the partitions' leaders.
    ApiKey.WRITE_TXN_MARKERS: Api(min_version=1, max_version=1, request=WriteTxnMarkersRequest,
                                  response=WriteTxnMarkersResponse, handler=lambda s: s.txn.write_txn_markers),
    ApiKey.TXN_OFFSET_COMMIT: Api(min_version=0, max_version=3, request=TxnOffsetCommitRequest,
                                  response=TxnOffsetCommitResponse, handler=lambda s: s.groups.txn_offset_commit),
}



def _check_ranges() -> None:
    """A range beyond kafka-python's schema would be advertised, then fail on every request."""
    for key, api in APIS.items():
        if not 0 <= api.min_version <= api.max_version <= api.request.max_version:
            raise ValueError(f"api {key}: range {api.min_version}-{api.max_version} outside the schema's")


_check_ranges()


def bind(services: Services) -> dict[int, Handler]:
    """Every API key's handler on the node these services belong to."""
    return {key: api.handler(services) for key, api in APIS.items()}


def version_entries() -> list[tuple[int, int, int]]:
    """(api key, min version, max version) of every API, by key: what ApiVersions advertises."""
    return [(key, api.min_version, api.max_version) for key, api in sorted(APIS.items())]


def response(api_key: int, version: int, **fields: Any) -> Any:
    """A response of API `api_key` at `version`, throttle time zero."""
    return APIS[api_key].response[version](throttle_time_ms=0, **fields)
