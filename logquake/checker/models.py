"""Sequential models for the linearizability checker (Porcupine's `Model`, in Python).

A model is a frozen record of pure functions, so adding one is writing a few functions and
registering them in `MODELS`; the search in linear.py knows nothing about registers.

    init()               the state before any op
    step(state, op)      -> (allowed, next state): may `op` take effect in `state`, and what
                         state follows. `op.known` is False for an indeterminate (info) op:
                         its `value` is what was invoked, the outcome is not known.
    equal(a, b)          state equality (default ==); used with `hash` for the search cache
    hash(state)          a hashable stand-in for the state (default: the state itself)
    partition(ops)       independent groups of ops, checked separately (P-compositionality);
                         the default groups by `Operation.key`
    describe(op)         an op in plain words; `describe_state(state)` likewise
    read_only(op)        True for ops that never change the state (reads); optional, it lets
                         the search place such an op as soon as it is allowed and never
                         reconsider it, which prunes most of the search on read-heavy histories
    overwrites(op)       True for blind writes: always allowed, and the state after them does
                         not depend on the state before (optional, it prunes the search)
    keep(op)             False for ops that cannot change the state or constrain it (an
                         indeterminate read), which the checker drops before searching
    simplify(ops)        one part's ops without those that cannot change its verdict, looking
                         at the whole part (optional; the registers drop indeterminate writes
                         whose value no op can have observed)

States must be immutable: the search shares them between branches.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MODELS",
    "Model",
    "Operation",
    "by_key",
    "cas_register",
    "get_model",
    "identity",
    "register",
]


@dataclass(frozen=True, slots=True)
class Operation:
    """One client op as the checker sees it: an interval [call, ret] and what it did.

    `ret` is None for an indeterminate op (info, or never completed): it may take effect at
    any time after `call`, or never. `value` is the completion's value when the op is known
    (ok), else the invocation's. `key` is the independent key (None for a single object).
    """

    id: int
    process: int | str
    f: str
    value: Any
    known: bool
    call: int
    ret: int | None
    key: Any = None
    invoke_index: int = -1
    complete_index: int | None = None


def by_key(ops: Sequence[Operation]) -> list[list[Operation]]:
    """Group ops by `key`, in order of first appearance."""
    groups: dict[Any, list[Operation]] = {}
    for op in ops:
        groups.setdefault(op.key, []).append(op)
    return list(groups.values())


def _always(_op: Operation) -> bool:
    return True


def _never(_op: Operation) -> bool:
    return False


def _is_read(op: Operation) -> bool:
    return op.f == "read"


def _is_write(op: Operation) -> bool:
    return op.f == "write"


def identity(state: Any) -> Hashable:
    return state


@dataclass(frozen=True, kw_only=True)
class Model:
    """A sequential specification; see the module docstring for each function's contract."""

    name: str
    fs: frozenset[str]
    init: Callable[[], Any]
    step: Callable[[Any, Operation], tuple[bool, Any]]
    describe: Callable[[Operation], str]
    describe_state: Callable[[Any], str] = repr
    equal: Callable[[Any, Any], bool] = operator.eq
    hash: Callable[[Any], Hashable] = identity
    partition: Callable[[Sequence[Operation]], list[list[Operation]]] = by_key
    keep: Callable[[Operation], bool] = _always
    read_only: Callable[[Operation], bool] = _never
    overwrites: Callable[[Operation], bool] = _never
    simplify: Callable[[Sequence[Operation]], list[Operation]] = list


# --- registers -------------------------------------------------------------------------------
# State: the register's value, None when never written (Jepsen's nil).


def _register_step(state: Any, op: Operation) -> tuple[bool, Any]:
    if op.f == "read":
        return state == op.value, state
    if op.f == "write":
        return True, op.value
    return False, state


def _cas_register_step(state: Any, op: Operation) -> tuple[bool, Any]:
    f = op.f  # the read/write cases repeat _register_step's: this is the search's inner loop
    if f == "read":
        return state == op.value, state
    if f == "write":
        return True, op.value
    old, new = op.value
    # An indeterminate cas that would fail changes nothing: the same as never taking effect,
    # which the search already explores, so refusing it here only prunes.
    if state == old:
        return True, new
    return False, state


def _describe_register_op(op: Operation) -> str:
    v = "nil" if op.value is None else repr(op.value)
    if op.f == "read":
        return f"read -> {v}"
    if op.f == "write":
        return f"write {v}" + ("" if op.known else " (indeterminate)")
    if op.f == "cas":
        old, new = op.value
        outcome = "ok" if op.known else "indeterminate"
        return f"cas {old!r} -> {new!r} ({outcome})"
    return f"{op.f} {v}"


def _describe_register_state(state: Any) -> str:
    return "nil" if state is None else repr(state)


def _keep_register_op(op: Operation) -> bool:
    return op.known or op.f != "read"  # an indeterminate read constrains nothing


def _drop_unobserved(ops: Sequence[Operation]) -> list[Operation]:
    """Without the indeterminate writes and cas whose new value no op can have observed.

    Why no verdict changes: if such an op took effect, the next op to take effect on the
    register either needed its value (a read returning it, a cas expecting it: there is
    none) or was a write, which makes the state the same as if it had never happened, so
    every linearization with it is one without it. This matters: every indeterminate op
    otherwise stays a candidate to the end of the search, which then grows with their
    number (a run under kills leaves dozens, nearly all never read).
    """
    observed: set[Any] = set()
    try:
        for op in ops:
            if op.f == "read" and op.known:
                observed.add(op.value)
            elif op.f == "cas":
                observed.add(op.value[0])
        return [op for op in ops if op.known or op.f == "read" or _new_value(op) in observed]
    except TypeError:  # an unhashable value: keep everything
        return list(ops)


def _new_value(op: Operation) -> Any:
    return op.value[1] if op.f == "cas" else op.value


def _register_model(name: str, fs: frozenset[str], step: Callable[[Any, Operation], tuple[bool, Any]]) -> Model:
    """A register model: plain and CAS registers differ only in their ops and step."""
    return Model(
        name=name,
        fs=fs,
        init=lambda: None,
        step=step,
        describe=_describe_register_op,
        describe_state=_describe_register_state,
        keep=_keep_register_op,
        read_only=_is_read,
        overwrites=_is_write,
        simplify=_drop_unobserved,
    )


register = _register_model("register", frozenset({"read", "write"}), _register_step)
cas_register = _register_model("cas-register", frozenset({"read", "write", "cas"}), _cas_register_step)

MODELS: dict[str, Model] = {m.name: m for m in (register, cas_register)}


def get_model(name: str) -> Model:
    """The model called `name`; raises KeyError naming the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}") from None
