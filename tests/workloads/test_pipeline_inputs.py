"""pipeline.paced_inputs, the input producer every pipeline client runs, without a server.

`send` here is the test's own record of what a client's publish answered; the loop's part is
what reaches the history: ops, values, keys, process numbers, stop and pace.
"""

from __future__ import annotations

import threading

from logquake.history import FAIL, INFO, INVOKE, OK
from logquake.workloads.pipeline import History, paced_inputs


def test_every_value_goes_to_its_key_and_an_ok_one_records_its_offset():
    hist = History()
    paced_inputs(3, 4, hist, lambda k, v: 100 + v)
    assert [(op.process, op.type, op.value) for op in hist.ops] == [
        (-1, INVOKE, [["send", 1, 1]]), (-1, OK, [["send", 1, [101, 1]]]),
        (-1, INVOKE, [["send", 2, 2]]), (-1, OK, [["send", 2, [102, 2]]]),
        (-1, INVOKE, [["send", 0, 3]]), (-1, OK, [["send", 0, [103, 3]]]),
        (-1, INVOKE, [["send", 1, 4]]), (-1, OK, [["send", 1, [104, 4]]]),
    ]


def test_an_info_input_retires_its_process_and_a_failed_one_does_not():
    answers = {1: (FAIL, "refused"), 2: (INFO, "no ack"), 3: 7}
    hist = History()
    paced_inputs(2, 3, hist, lambda k, v: answers[v])
    done = [(op.process, op.type, op.value, op.get("error")) for op in hist.ops if op.type != INVOKE]
    assert done == [(-1, FAIL, [["send", 1, 1]], "refused"), (-1, INFO, [["send", 0, 2]], "no ack"),
                    (-2, OK, [["send", 1, [7, 3]]], None)]


def test_it_stops_when_told_and_keeps_its_pace():
    stop, sent = threading.Event(), []

    def send(k: int, v: int) -> int:
        sent.append(v)
        if v == 3:
            stop.set()
        return v

    paced_inputs(1, 100, History(), send, stop=stop)
    assert sent == [1, 2, 3]
    hist = History()
    paced_inputs(1, 5, hist, lambda k, v: v, rate=50.0)  # value v not before v / rate s
    oks = [op for op in hist.ops if op.type == OK]
    assert len(oks) == 5 and oks[-1].time >= 5 / 50.0 * 1e9
