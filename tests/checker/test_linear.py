"""Hand-written histories for the linearizability checker, one firing and one quiet case each."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from logquake.checker.linear import check_linearizable
from logquake.checker.models import Model, Operation, cas_register, get_model, register
from logquake.errors import UserError
from logquake.history import Op


def h(*events: tuple[int, int, str, str, Any]) -> list[Op]:
    """A history from (time, process, type, f, value) events, indexed in order."""
    return [
        Op(index=i, time=t, process=p, type=typ, f=f, value=v) for i, (t, p, typ, f, v) in enumerate(events)
    ]


def valid(history: list[Op], model: Model = cas_register, **kw: Any) -> bool | str:
    return check_linearizable(history, model, **kw)["valid"]


# --- register ---------------------------------------------------------------------------------


def test_sequential_write_then_read_is_linearizable() -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "ok", "write", 1),
        (2, 1, "invoke", "read", None),
        (3, 1, "ok", "read", 1),
    )
    assert valid(hist, register) is True


def test_stale_read_after_write_completed_is_not() -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "ok", "write", 1),
        (2, 1, "invoke", "read", None),
        (3, 1, "ok", "read", None),
    )
    res = check_linearizable(hist, register)
    assert res["valid"] is False
    assert res["bad_error_types"] == ["nonlinearizable"]
    err = res["anomalies"]["nonlinearizable"]["errs"][0]
    assert err["op"]["invoke_index"] == 2 and err["op"]["f"] == "read"
    assert err["prefix_length"] == 1  # the write
    assert err["states"] == ["1"]
    assert "read -> nil" in err["explanation"] and "state 1" in err["explanation"]


@pytest.mark.parametrize("seen", [None, 1])
def test_read_concurrent_with_write_may_see_either(seen: int | None) -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 1, "invoke", "read", None),
        (2, 1, "ok", "read", seen),
        (3, 0, "ok", "write", 1),
    )
    assert valid(hist, register) is True


def test_read_of_a_value_never_written_is_not_linearizable() -> None:
    hist = h((0, 0, "invoke", "read", None), (1, 0, "ok", "read", 7))
    assert valid(hist, register) is False


def test_two_reads_disagreeing_on_order_of_writes() -> None:
    # writes 1 and 2 are concurrent, but once one reader saw 2 after 1, another cannot see 1 after 2.
    hist = h(
        (0, 0, "invoke", "write", 1),
        (0, 1, "invoke", "write", 2),
        (1, 0, "ok", "write", 1),
        (1, 1, "ok", "write", 2),
        (2, 2, "invoke", "read", None),
        (3, 2, "ok", "read", 2),
        (4, 3, "invoke", "read", None),
        (5, 3, "ok", "read", 1),
    )
    assert valid(hist, register) is False


# --- indeterminate and failed ops -------------------------------------------------------------


@pytest.mark.parametrize("later", [None, 1])
def test_info_write_may_take_effect_or_not(later: int | None) -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "info", "write", 1),
        (5, 1, "invoke", "read", None),
        (6, 1, "ok", "read", later),
    )
    assert valid(hist, register) is True


def test_info_write_may_take_effect_long_after_it_completed() -> None:
    # nil, then 1 much later: the info write took effect after its "completion".
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "info", "write", 1),
        (5, 1, "invoke", "read", None),
        (6, 1, "ok", "read", None),
        (7, 1, "invoke", "read", None),
        (8, 1, "ok", "read", 1),
    )
    assert valid(hist, register) is True


def test_info_write_may_land_after_a_later_ok_write() -> None:
    # The info write overwrote the ok one: the prune of "info op, then a blind write" must
    # not hide the order ok write, then info write.
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "info", "write", 1),
        (2, 1, "invoke", "write", 2),
        (3, 1, "ok", "write", 2),
        (4, 2, "invoke", "read", None),
        (5, 2, "ok", "read", 1),
    )
    assert valid(hist, register) is True


def test_info_write_cannot_take_effect_twice() -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "info", "write", 1),
        (2, 1, "invoke", "read", None),
        (3, 1, "ok", "read", 1),
        (4, 1, "invoke", "read", None),
        (5, 1, "ok", "read", None),
    )
    assert valid(hist, register) is False


def test_info_write_cannot_take_effect_before_its_invocation() -> None:
    hist = h(
        (0, 1, "invoke", "read", None),
        (1, 1, "ok", "read", 1),
        (2, 0, "invoke", "write", 1),
        (3, 0, "info", "write", 1),
    )
    assert valid(hist, register) is False


def test_never_completed_op_counts_as_indeterminate() -> None:
    hist = h((0, 0, "invoke", "write", 1), (5, 1, "invoke", "read", None), (6, 1, "ok", "read", 1))
    assert valid(hist, register) is True


def test_failed_write_did_not_happen() -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "fail", "write", 1),
        (2, 1, "invoke", "read", None),
        (3, 1, "ok", "read", 1),
    )
    assert valid(hist, register) is False


# --- closed intervals: equal timestamps mean concurrent ---------------------------------------


def test_invoke_at_the_instant_of_another_completion_is_concurrent() -> None:
    # write 2 completes at t=10 and the read is invoked at t=10: the clock cannot order them,
    # so the read may precede the write and see 1.
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "ok", "write", 1),
        (5, 1, "invoke", "write", 2),
        (10, 1, "ok", "write", 2),
        (10, 2, "invoke", "read", None),
        (12, 2, "ok", "read", 1),
    )
    assert valid(hist, register) is True


def test_invoke_one_tick_after_completion_is_ordered() -> None:
    hist = h(
        (0, 0, "invoke", "write", 1),
        (1, 0, "ok", "write", 1),
        (5, 1, "invoke", "write", 2),
        (10, 1, "ok", "write", 2),
        (11, 2, "invoke", "read", None),
        (12, 2, "ok", "read", 1),
    )
    assert valid(hist, register) is False


def test_zero_length_intervals_at_the_same_instant_are_concurrent() -> None:
    hist = h(
        (3, 0, "invoke", "write", 1),
        (3, 1, "invoke", "read", None),
        (3, 1, "ok", "read", None),
        (3, 0, "ok", "write", 1),
    )
    assert valid(hist, register) is True


# --- cas-register -----------------------------------------------------------------------------


def test_cas_chain_is_linearizable() -> None:
    hist = h(
        (0, 0, "invoke", "write", 0),
        (1, 0, "ok", "write", 0),
        (2, 0, "invoke", "cas", [0, 1]),
        (3, 0, "ok", "cas", [0, 1]),
        (4, 1, "invoke", "read", None),
        (5, 1, "ok", "read", 1),
    )
    assert valid(hist) is True


def test_cas_from_a_value_the_register_never_held() -> None:
    hist = h(
        (0, 0, "invoke", "write", 0),
        (1, 0, "ok", "write", 0),
        (2, 0, "invoke", "cas", [1, 2]),
        (3, 0, "ok", "cas", [1, 2]),
    )
    res = check_linearizable(hist, cas_register)
    assert res["valid"] is False
    err = res["anomalies"]["nonlinearizable"]["errs"][0]
    assert err["op"]["f"] == "cas" and err["op"]["value"] == [1, 2]
    assert "cas 1 -> 2 (ok)" in err["explanation"]


def test_two_concurrent_cas_from_the_same_value_cannot_both_succeed() -> None:
    hist = h(
        (0, 0, "invoke", "write", 0),
        (1, 0, "ok", "write", 0),
        (2, 1, "invoke", "cas", [0, 1]),
        (2, 2, "invoke", "cas", [0, 1]),
        (3, 1, "ok", "cas", [0, 1]),
        (3, 2, "ok", "cas", [0, 1]),
    )
    assert valid(hist) is False


def test_failed_cas_is_dropped_and_info_cas_is_optional() -> None:
    base = [
        (0, 0, "invoke", "write", 0),
        (1, 0, "ok", "write", 0),
        (2, 1, "invoke", "cas", [0, 5]),
        (3, 1, "fail", "cas", [0, 5]),
        (4, 2, "invoke", "cas", [0, 1]),
        (5, 2, "info", "cas", [0, 1]),
        (6, 3, "invoke", "read", None),
    ]
    assert valid(h(*base, (7, 3, "ok", "read", 1))) is True
    assert valid(h(*base, (7, 3, "ok", "read", 0))) is True
    assert valid(h(*base, (7, 3, "ok", "read", 5))) is False


def test_register_model_rejects_cas_ops_with_a_clear_error() -> None:
    hist = h((0, 0, "invoke", "cas", [0, 1]), (1, 0, "ok", "cas", [0, 1]))
    with pytest.raises(UserError, match="register model knows only read, write"):
        check_linearizable(hist, register)


def test_malformed_cas_value_is_a_user_error() -> None:
    hist = h((0, 0, "invoke", "cas", 3), (1, 0, "ok", "cas", 3))
    with pytest.raises(UserError, match=r"op 0 .*cas needs a value \[old new\]"):
        check_linearizable(hist, cas_register)


# --- keys, budgets, results shape -------------------------------------------------------------


def test_independent_keys_are_checked_separately() -> None:
    hist = h(
        (0, 0, "invoke", "write", ["a", 1]),
        (1, 0, "ok", "write", ["a", 1]),
        (2, 1, "invoke", "write", ["b", 2]),
        (3, 1, "ok", "write", ["b", 2]),
        (4, 2, "invoke", "read", ["a", None]),
        (5, 2, "ok", "read", ["a", 1]),
        (6, 2, "invoke", "cas", ["b", [1, 3]]),
        (7, 2, "ok", "cas", ["b", [1, 3]]),
    )
    res = check_linearizable(hist, cas_register)
    assert res["valid"] is False
    assert res["linear"]["keys"] == 2 and res["linear"]["invalid_keys"] == 1
    assert res["anomalies"]["nonlinearizable"]["count"] == 1
    assert res["anomalies"]["nonlinearizable"]["errs"][0]["key"] == "b"
    assert "of key 'b'" in res["anomalies"]["nonlinearizable"]["errs"][0]["explanation"]


def test_nemesis_ops_are_ignored_and_empty_history_is_unknown() -> None:
    hist = [Op(index=0, time=0, process="nemesis", type="info", f="start-partition", value="majority")]
    res = check_linearizable(hist, cas_register)
    assert res["valid"] == "unknown"
    assert "no cas/read/write ops" in res["linear"]["reason"]


def test_only_failed_and_indeterminate_ops_are_vacuously_linearizable() -> None:
    hist = h(
        (0, 0, "invoke", "cas", [4, 0]),
        (1, 1, "invoke", "read", None),
        (2, 1, "fail", "read", None),
        (3, 0, "info", "cas", [4, 0]),
    )
    res = check_linearizable(hist, cas_register)
    assert res["valid"] is True and res["linear"]["ops"] == 1 and "reason" not in res["linear"]


def _long_history(n: int) -> list[Op]:
    events = []
    for i in range(n):
        f, v = ("write", i) if i % 2 == 0 else ("read", i - 1)
        events += [(2 * i, 0, "invoke", f, v if f == "write" else None), (2 * i + 1, 0, "ok", f, v)]
    return h(*events)


def test_exhausted_time_budget_is_unknown_not_a_hang() -> None:
    res = check_linearizable(_long_history(6000), cas_register, time_budget=0.0)
    assert res["valid"] == "unknown"
    assert "time budget" in res["linear"]["unknown_keys"][0]["reason"]


def test_cache_bound_is_unknown_not_out_of_memory() -> None:
    res = check_linearizable(_long_history(6000), cas_register, max_cache=100)
    assert res["valid"] == "unknown"
    assert "cache bound" in res["linear"]["unknown_keys"][0]["reason"]
    assert check_linearizable(_long_history(6000), cas_register)["valid"] is True


def test_results_shape() -> None:
    res = check_linearizable(_long_history(10), register)
    assert res["valid"] is True
    assert res["bad_error_types"] == [] and res["error_types"] == [] and res["anomalies"] == {}
    assert res["linear"]["model"] == "register" and res["linear"]["ops"] == 10


# --- adding a model ---------------------------------------------------------------------------


def _counter_step(state: int, op: Operation) -> tuple[bool, int]:
    if op.f == "add":
        return True, state + op.value
    return state == op.value, state


def test_a_new_model_with_a_colliding_hash_still_checks_exactly() -> None:
    # hash = parity forces the (bits, hash) cache to resolve collisions with `equal`.
    counter = Model(
        name="counter",
        fs=frozenset({"add", "read"}),
        init=lambda: 0,
        step=_counter_step,
        describe=lambda op: f"{op.f} {op.value}",
        hash=lambda s: s % 2,
    )
    base = [
        (0, 0, "invoke", "add", 1),
        (0, 1, "invoke", "add", 2),
        (1, 0, "ok", "add", 1),
        (1, 1, "ok", "add", 2),
        (2, 2, "invoke", "read", None),
    ]
    assert valid(h(*base, (3, 2, "ok", "read", 3)), counter) is True
    assert valid(h(*base, (3, 2, "ok", "read", 1)), counter) is False


def test_get_model_names_the_known_models() -> None:
    assert get_model("cas-register") is cas_register
    with pytest.raises(KeyError, match="cas-register, register"):
        get_model("queue")


def test_operation_is_a_frozen_value() -> None:
    op = Operation(id=0, process=0, f="read", value=None, known=True, call=0, ret=1)
    assert replace(op, value=2).value == 2
    with pytest.raises(AttributeError):
        op.value = 3  # type: ignore[misc]
