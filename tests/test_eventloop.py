"""eventloop.run: the result of a run is handed back without ever being formatted."""

from __future__ import annotations

import signal

from vastprobe import eventloop


class _Loud:
    reprs = 0

    def __repr__(self) -> str:
        _Loud.reprs += 1
        return "loud"


def test_the_result_is_returned_and_never_repr_d() -> None:
    # asyncio.run formats the main task (and so its result) when SIGINT has Python's own handler,
    # which a suite run under nohup (SIGINT ignored) does not have: set it for the test
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = _Loud()

        async def work() -> _Loud:
            return result

        _Loud.reprs = 0
        assert eventloop.run(work()) is result
        assert _Loud.reprs == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
