"""The Kafka error codes the group, idempotence and transaction state machines answer with.

The state machines return codes, never raise them: an error code is a normal answer to a
client (the request handler copies it into the response). Values are the wire codes of the
Kafka protocol (the same numbers as `kafka.errors`, whose names are the Kafka names).
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka protocol error codes (a subset: those our coordinators produce)."""

    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    UNKNOWN_PRODUCER_ID = 59
    MEMBER_ID_REQUIRED = 79
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
