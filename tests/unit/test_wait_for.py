"""``realparts.processes.wait_for``: what counts as "not yet" and what ends the wait at once."""

from __future__ import annotations

import time

import pytest

from realparts.processes import WaitError, wait_for


def test_an_error_of_a_state_to_come_is_retried_until_ready():
    calls = []

    def ready() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("not listening yet")
        return "up"

    assert wait_for(ready, timeout=5, interval=0.01) == "up"
    assert len(calls) == 3


def test_an_error_still_there_at_the_deadline_is_named():
    def ready() -> bool:
        raise KeyError("status")

    with pytest.raises(WaitError, match=r"the thing: not ready after 0 s \(KeyError: 'status'\)"):
        wait_for(ready, timeout=0.05, what="the thing", interval=0.01)


@pytest.mark.parametrize(
    "error",
    [AssertionError("2 == 3"), TypeError("f() takes 1 argument"), NameError("nodse"),
     AttributeError("'NoneType' object has no attribute 'status'")],
)  # fmt: skip
def test_an_assertion_or_a_coding_error_is_raised_at_once(error):
    calls = []

    def ready() -> bool:
        calls.append(1)
        raise error

    started = time.monotonic()
    with pytest.raises(type(error)):
        wait_for(ready, timeout=30, interval=0.01)
    assert len(calls) == 1
    assert time.monotonic() - started < 5


def test_a_process_that_exits_ends_the_wait():
    with pytest.raises(WaitError, match="the server: the process exited\nlast line"):
        wait_for(lambda: False, timeout=30, what="the server", alive=lambda: False,
                 log=lambda: "last line")  # fmt: skip
