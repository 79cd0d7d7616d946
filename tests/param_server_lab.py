"""A parameter server and its workers over real sockets (made by a session's helper). A parameter server. `ps.py server PORT N`: accepts N workers, then for ever: reads one gradient line from
each worker in turn (blocking recv, no timeout), then sends each an updated-weights line.
`ps.py worker PORT [stop|deadlock] [AT]`: connects, then loops: compute 20 ms, send a gradient line, read the
weights line; at step AT stops itself (SIGSTOP) or deadlocks on its own lock, before sending; `slowsleep`
sleeps 3 s a step (a straggler)."""

import os
import signal
import socket
import sys
import threading
import time

if sys.argv[1] == "server":
    port, n = int(sys.argv[2]), int(sys.argv[3])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    ws = [ls.accept()[0] for _ in range(n)]
    fs = [w.makefile("rb") for w in ws]
    v = 0
    while True:
        for f in fs:
            line = f.readline()
            if not line:
                sys.exit(1)
            v += 1
        for w in ws:
            w.sendall(f"{v}\n".encode())
else:
    port = int(sys.argv[2])
    fault = sys.argv[3] if len(sys.argv) > 3 else "none"
    at = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    while True:
        try:
            c = socket.create_connection(("127.0.0.1", port))
            break
        except OSError:
            time.sleep(0.1)
    f = c.makefile("rb")
    lock = threading.Lock()
    step = 0
    while True:
        step += 1
        t1 = time.perf_counter() + (3.0 if fault == "slow" else 0.02)
        if fault == "slowsleep":
            time.sleep(3.0)
        while time.perf_counter() < t1:
            pass
        if step == at and fault == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if step == at and fault == "deadlock":
            lock.acquire()
            lock.acquire()
        c.sendall(b"grad 0.1 0.2 0.3\n")
        f.readline()
