"""A ring job over real sockets, as gloo's ranks exchange (made by a session's helper to find where a
run of several hosts read a training ring wrong). A torchrun-like job: `tr.py launch RUN WORLD LOCAL_RANKS MASTER_PORT` spawns local ranks (env as torchrun);
rank 0 runs a TCP store server thread (line protocol SET/GET, GET blocks until set); every rank registers its
ring listener in the store, connects to the next rank, accepts from the previous one, then loops a ring
"allreduce": send 8 bytes to next, recv 8 bytes from prev (blocking, no timeout); one log line per step.
TR_CULPRIT=rank, TR_HOW=stop|deadlock|compute|exit, TR_AT=step; TR_STEP_SLEEP seconds per step (default 0.05).
TR_SYM=step: from that step on every rank receives before it sends: a symmetric hang, each rank waiting on the previous.
A watchdog thread per rank wakes every second (like NCCL's). The launcher polls its ranks every 0.1 s."""
# ruff: noqa: SIM115, B023

import os
import signal
import socket
import subprocess
import sys
import threading
import time


def store_server(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    data, cv = {}, threading.Condition()

    def serve(c):
        f = c.makefile("rb")
        for line in f:
            parts = line.decode().split()
            if parts[0] == "SET":
                with cv:
                    data[parts[1]] = parts[2]
                    cv.notify_all()
                c.sendall(b"OK\n")
            elif parts[0] == "GET":
                with cv:
                    cv.wait_for(lambda: parts[1] in data)
                    v = data[parts[1]]
                c.sendall(v.encode() + b"\n")

    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def rank_main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    mport = int(os.environ["MASTER_PORT"])
    if rank == 0:
        threading.Thread(target=store_server, args=(mport,), daemon=True, name="store").start()
    while True:
        try:
            st = socket.create_connection(("127.0.0.1", mport))
            break
        except OSError:
            time.sleep(0.05)
    sf = st.makefile("rb")

    def sset(k, v):
        st.sendall(f"SET {k} {v}\n".encode())
        sf.readline()

    def sget(k):
        st.sendall(f"GET {k}\n".encode())
        return sf.readline().decode().strip()

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    sset(f"addr{rank}", ls.getsockname()[1])
    nport = int(sget(f"addr{(rank + 1) % world}"))
    nxt = socket.create_connection(("127.0.0.1", nport))
    prv, _ = ls.accept()
    ls.close()
    sset(f"ready{rank}", 1)
    for r in range(world):
        sget(f"ready{r}")
    ready = os.environ.get("TR_READY")
    if ready:
        open(f"{ready}.{rank}", "w").write(str(os.getpid()))
    stop = threading.Event()

    def watchdog():
        while not stop.wait(1.0):
            pass

    threading.Thread(target=watchdog, daemon=True, name="watchdog").start()
    culprit = int(os.environ.get("TR_CULPRIT", "-1"))
    how = os.environ.get("TR_HOW", "none")
    at = int(os.environ.get("TR_AT", "50"))
    nap = float(os.environ.get("TR_STEP_SLEEP", "0.05"))
    comp = float(os.environ.get("TR_COMPUTE", "0"))
    logf = open(os.environ["TR_LOG"] + f".{rank}", "a") if os.environ.get("TR_LOG") else None
    lock = threading.Lock()
    step = 0
    while True:
        step += 1
        if rank == culprit and step == at:
            if how == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif how == "deadlock":
                lock.acquire()
                lock.acquire()
            elif how == "compute":
                while True:
                    pass
            elif how == "exit":
                os._exit(1)
        sym = int(os.environ.get("TR_SYM", "0"))
        if not (sym and step >= sym):
            nxt.sendall(step.to_bytes(8, "little"))
        got = b""
        while len(got) < 8:
            b = prv.recv(8 - len(got))
            if not b:
                raise SystemExit("peer closed")
            got += b
        if nap:
            time.sleep(nap)
        if comp:
            t1 = time.perf_counter() + comp
            while time.perf_counter() < t1:
                pass
        if logf:
            logf.write(f"step {step}\n")
            logf.flush()


def launch(run, world, local, mport):
    env = dict(
        os.environ,
        WORLD_SIZE=world,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=mport,
        TORCHELASTIC_RUN_ID=run,
        LOCAL_WORLD_SIZE=str(len(local.split(","))),
    )
    ranks = [
        subprocess.Popen([sys.executable, __file__, "rank", run], env=dict(env, RANK=r, LOCAL_RANK=str(i)))
        for i, r in enumerate(local.split(","))
    ]
    while True:
        if all(p.poll() is not None for p in ranks):
            return
        time.sleep(0.1)


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        rank_main()
    else:
        launch(*sys.argv[2:6])
