"""The reader's fast path against its slow twin: `_fast_op` may decline a line (then
`_parse_line` decides), but it must never accept one `_parse_line` rejects, and when both
accept they must build the same Op."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from logquake.history import _fast_op, _parse_line

# What a field may wrongly hold: every JSON type, ints past 64 bits, the names of other fields.
_wrong = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["nemesis", "invoke", "ok", "fail", "info", "send", "poll", "other", ""]),
    st.lists(st.integers(-2, 2), max_size=2),
    st.dictionaries(st.sampled_from(["a", "1"]), st.integers(), max_size=1),
)
_offsets = st.integers(-3, 3) | st.integers(2**62, 2**64) | st.none() | st.booleans() | st.floats(-2, 2)
_sends = st.builds(lambda k, o, v, done: ["send", k, [o, v] if done else v],
                   st.integers(0, 3), _offsets, st.integers(-3, 3), st.booleans())
_polls = st.builds(lambda reads: ["poll", reads],
                   st.dictionaries(st.sampled_from(["0", "1", "x"]),
                                   st.lists(st.lists(_offsets, min_size=0, max_size=3), max_size=3), max_size=2))
_values = st.one_of(st.none(), st.lists(st.one_of(_sends, _polls, st.just(["poll"]), _wrong), max_size=3), _wrong)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """A history line: a well-formed op, then each field kept, dropped or given a wrong
    value; sometimes spaces after brackets (the offset rule's scan must see "[ -1"), extra
    fields, or something that is not an object or not JSON at all."""
    d = {
        "index": draw(st.integers(0, 10)),
        "time": draw(st.integers(0, 10**6)),
        "process": draw(st.integers(0, 3) | st.just("nemesis")),
        "type": draw(st.sampled_from(["invoke", "ok", "fail", "info"])),
        "f": draw(st.sampled_from(["send", "poll", "txn", "assign"])),
        "value": draw(_values),
    }
    for key in list(d):
        change = draw(st.sampled_from(["keep"] * 4 + ["drop", "wrong"]))
        if change == "drop":
            del d[key]
        elif change == "wrong":
            d[key] = draw(_wrong)
    d.update(draw(st.dictionaries(st.sampled_from(["error", "final", "node"]), _wrong, max_size=2)))
    shape = draw(st.sampled_from(["object"] * 6 + ["list", "number", "torn"]))
    text = json.dumps(d if shape == "object" else [d] if shape == "list" else 7)
    if draw(st.booleans()):
        text = text.replace("[", "[ ")
    raw = text.encode() + b"\n"
    return raw[: len(raw) // 2] if shape == "torn" else raw


@given(lines())
@example(b'{"index":0,"time":0,"process":0,"type":"ok","f":"send","value":[["send",1,[ -2,5]]]}\n')
@example(b'{"index":0,"time":0,"process":0,"type":"ok","f":"send","value":[["send",1,[-1,5]]]}\n')
@example(b'{"index":true,"time":0,"process":0,"type":"ok","f":"poll"}\n')
@example(b'{"index":0,"time":0,"process":false,"type":"ok","f":"poll"}\n')
@example(b'{"index":0,"time":0,"process":0,"type":["ok"],"f":"poll"}\n')
def test_fast_op_accepts_only_what_parse_line_accepts_and_builds_the_same_op(raw: bytes) -> None:
    fast = _fast_op(raw)
    slow, problem = _parse_line(raw)
    if fast is None:
        return
    assert problem is None, f"_fast_op accepted a line _parse_line rejects: {problem}"
    assert fast == slow
    assert type(fast.extra) is type(slow.extra) and fast.f is slow.f and fast.type is slow.type
