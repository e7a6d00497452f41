"""The register models' `simplify`: indeterminate writes nobody observed leave the search.

An offsets run under kills leaves dozens of commits with unknown outcome, nearly none of
them ever read; each stayed a candidate to the end of the search. Dropping them must never
change a verdict: checked against the plain search (no prunes, no simplify) on random
histories, with the brute force of tests/checker/test_linear_property.py as the shape.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings

from logquake.checker.linear import check_linearizable, operations_from_history
from logquake.checker.models import cas_register, register
from logquake.history import Op
from tests.checker.test_linear_property import Spec, specs, to_history

PLAIN = {
    m.name: replace(m, read_only=lambda op: False, overwrites=lambda op: False, simplify=list)
    for m in (register, cas_register)
}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(specs(cas=False, max_ops=12))
@example([Spec("write", 1, 0, 1, "info"), Spec("write", 2, 2, 3, "ok"), Spec("read", 2, 4, 5, "ok")])
@example([Spec("write", 1, 0, 9, "info"), Spec("read", None, 1, 2, "ok"), Spec("read", None, 5, 6, "ok")])
def test_register_simplify_never_changes_a_verdict(spec: list[Spec]) -> None:
    ops = to_history(spec)
    assert check_linearizable(ops, register)["valid"] == check_linearizable(ops, PLAIN["register"])["valid"]


@SETTINGS
@given(specs(cas=True, max_ops=12))
@example([Spec("write", 1, 0, 9, "info"), Spec("cas", (1, 2), 1, 2, "info"), Spec("read", 2, 5, 6, "ok")])
def test_cas_register_simplify_never_changes_a_verdict(spec: list[Spec]) -> None:
    ops = to_history(spec)
    plain = PLAIN["cas-register"]
    assert check_linearizable(ops, cas_register)["valid"] == check_linearizable(ops, plain)["valid"]


def _op(i: int, process: int, type_: str, f: str, value: object) -> Op:
    return Op(index=i, time=i, process=process, type=type_, f=f, value=value)


def test_only_unobserved_indeterminate_writes_are_dropped():
    history = [
        _op(0, 0, "invoke", "write", [0, 1]), _op(1, 0, "info", "write", [0, 1]),  # read later: kept
        _op(2, 1, "invoke", "write", [0, 2]), _op(3, 1, "info", "write", [0, 2]),  # never read: dropped
        _op(4, 2, "invoke", "write", [0, 3]), _op(5, 2, "ok", "write", [0, 3]),  # known: kept
        _op(6, 3, "invoke", "read", [0, None]), _op(7, 3, "ok", "read", [0, 1]),
        _op(8, 4, "invoke", "write", [1, 2]), _op(9, 4, "info", "write", [1, 2]),  # key 1 reads no 2
        _op(10, 5, "invoke", "read", [1, None]), _op(11, 5, "ok", "read", [1, None]),
    ]
    ops = operations_from_history(history, register)
    kept = {(op.key, op.value, op.known) for part in register.partition(ops) for op in register.simplify(part)}
    assert kept == {(0, 1, False), (0, 3, True), (0, 1, True), (1, None, True)}
    # Read 1 after the ok write of 3 can only be the indeterminate write taking effect late.
    assert check_linearizable(history, register)["valid"] is True
