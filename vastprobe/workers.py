"""Threads kept between jobs, for the analysis a sweep runs off its event loop (pipeline.report_in_worker).

A sweep started one thread per host, and the event loop waited in Thread.start() for each to be
scheduled, behind the GIL another analysis held. Here a job goes to an idle thread, else to a new
one, so a job past its budget (still running to its next checkpoint) never holds up the next; at
most `keep` threads stay idle. Daemon threads, as before: one still running at exit ends with the
process.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable


class Workers:
    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        os.register_at_fork(after_in_child=self._forget)

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            q = self._idle.pop() if self._idle else None
        if q is None:
            q = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(q,), name="vastprobe-analysis", daemon=True).start()
        q.put(job)

    def _serve(self, q: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            job = q.get()
            job()
            del job  # the finished job's capture and report are not kept alive while idle
            with self._lock:
                if len(self._idle) >= self.keep:
                    return
                self._idle.append(q)

    def _forget(self) -> None:
        """In a forked child: the parent's threads are not there to serve."""
        self._lock = threading.Lock()
        self._idle = []
