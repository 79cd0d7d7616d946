"""Did a process move between the probe's two samples? CPU ticks, I/O bytes and state changes each
count as movement, and so does leaving: a process seen in the first sample and gone by the second
(exited, or its PID reused) was not stuck. Its main thread's context switches count where a process is
proven still (a holder, a job whose log is quiet): `active`."""

from __future__ import annotations

from dataclasses import dataclass

from vastprobe.model import Process, ProcIO


@dataclass(frozen=True)
class Progress:
    sampled: bool  # two samples were taken of this process
    cpu_ticks: int
    io_bytes: int | None
    ctxt_switches: int | None
    state_changed: bool
    gone: bool = False  # the probe took a second sample and this process was not in it
    thread_running: bool = False  # a thread other than the main one was read running (R)

    @property
    def moved(self) -> bool:
        """It did work a counter shows: CPU, I/O, a state change, or it left; or a thread of it was
        running. A wake alone is not work: a client polling on a timeout wakes without moving its wait
        on. A worker thread under a CPU quota of 1% runs less than a clock tick a second: its job read
        STALLED, "no CPU", while it computed (found by a helper)."""
        return bool(self.gone or self.cpu_ticks or self.io_bytes or self.state_changed or self.thread_running)

    @property
    def active(self) -> bool:
        """It moved, or its main thread was scheduled between the samples (a voluntary context
        switch): a process that only sends and receives on sockets, or steps through a semaphore,
        counts no tick and no vfs byte, and its log going quiet read STALLED (found by a helper). What
        a process holds or a job that logs proves still must be neither."""
        return self.moved or bool(self.ctxt_switches)


def progress(p: Process, samples_taken: int = 1) -> Progress:
    """`samples_taken`: how many samples the probe took of the host (a process can have fewer)."""
    if len(p.samples) < 2:
        return Progress(False, 0, None, None, False, gone=samples_taken >= 2 and len(p.samples) == 1)
    a, b = p.samples[0], p.samples[-1]
    io = None
    if isinstance(a.io, ProcIO) and isinstance(b.io, ProcIO):
        io = (b.io.rchar + b.io.wchar) - (a.io.rchar + a.io.wchar)
    ctxt = None
    if a.voluntary_ctxt is not None and b.voluntary_ctxt is not None:
        # the second sample reads the voluntary count alone (the probe's one status line there)
        ctxt = b.voluntary_ctxt - a.voluntary_ctxt
        if a.nonvoluntary_ctxt is not None and b.nonvoluntary_ctxt is not None:
            ctxt += b.nonvoluntary_ctxt - a.nonvoluntary_ctxt
    running = any(t.state == "R" for t in p.threads_detail)
    return Progress(True, b.cpu_ticks - a.cpu_ticks, io, ctxt, a.state != b.state, thread_running=running)
