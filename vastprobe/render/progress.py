"""The sweep's progress line on stderr, when it is a terminal: there at once (0/N), with the time
elapsed and the hosts in flight, redrawn every half second until the sweep ends. Plain escape
codes, no rich: the JSON paths import nothing they do not print."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import IO

WIDTH = 30


class SweepProgress:
    def __init__(self, total: int, stream: IO[str] | None = None, interval: float = 0.5) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.interval = interval
        self.done = 0
        self.failed = 0
        self.in_flight = 0
        self.started_at = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vastprobe-progress", daemon=True)

    def start(self) -> SweepProgress:
        self.started_at = time.monotonic()
        self.draw()
        self._thread.start()
        return self

    def started(self, _target: str) -> None:
        with self._lock:
            self.in_flight += 1
        self.draw()

    def finished(self, status: str, probed: bool = True) -> None:
        with self._lock:
            self.done += 1
            if probed:
                self.in_flight = max(0, self.in_flight - 1)
            self.failed += status not in ("ok", "skipped")
        self.draw()

    def stop(self) -> None:
        """Draw the last state and end the line, so what follows starts on a line of its own."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.draw()
        self.stream.write("\n")
        self.stream.flush()

    def line(self) -> str:
        with self._lock:
            done, failed, flying = self.done, self.failed, self.in_flight
        filled = WIDTH * done // max(1, self.total)
        bar = "#" * filled + "." * (WIDTH - filled)
        text = f"[{bar}] {done}/{self.total} hosts, {flying} in flight, {failed} not probed, {self.elapsed():.0f}s"
        return text[: max(10, shutil.get_terminal_size((80, 24)).columns - 1)]

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def draw(self) -> None:
        try:
            self.stream.write("\r\x1b[2K" + self.line())
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away
            self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.draw()


def progress_for(total: int) -> SweepProgress | None:
    """A progress line when stderr is a terminal; nothing in cron or a pipe."""
    if not sys.stderr.isatty():
        return None
    return SweepProgress(total).start()
