"""A distributed job as /proc sees one, without PyTorch: a launcher (torchrun's agent) and N ranks,
plain Python processes with the environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID). Each rank connects to every other
(gloo's full mesh of TCP pairs on 127.0.0.1), then does what a rank in a collective does: its main
thread waits for the collective's work (a futex with no timeout) while a communication thread polls
the connections (epoll), or, with LAB_SPIN, spins on its CPU as NCCL's ranks do (LAB_LOG: and appends to
its log as a rank that trains does). With LAB_RUNLOOPS, each rank also has gloo's two run loops (threads
named pt_gloo_runloop), one of them waiting with a deadline as inside a collective; the culprit of HOW
`skip` waits as the others do, but its run loops are idle (fixtures/procfs/torch-gloo-skip, recorded).
One rank, the culprit, is elsewhere instead. tests/fixtures torch-gloo-fifo is the same shape recorded
from real PyTorch.

    python tests/rank_lab.py launch PORTS RUN_ID CULPRIT HOW [FIFO_OR_PATH]    # PORTS: one per rank, a,b,c
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

HOWS = (
    "fifo",
    "stopped",
    "killed",
    "fuse",
    "oom",
    "none",
    "timedwait",
    "subsleep",
    "download",
    "download-thread",
    "skip",
)


def _run_loop(deadline: float | None) -> None:
    """One of gloo's run loops (ProcessGroupGloo's workers, named so by torch): idle, it waits for work
    with no deadline; inside a collective, on its peer's data with the group's timeout (`deadline`)."""
    import ctypes

    ctypes.CDLL(None).prctl(15, b"pt_gloo_runloop", 0, 0, 0)  # PR_SET_NAME: the thread's comm
    threading.Event().wait(deadline)


def _store(port: int, world: int) -> None:
    """Rank 0's rendezvous: once every rank has connected, one byte to each."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(world)
    joined = [listener.accept()[0] for _ in range(world)]
    for c in joined:
        c.sendall(b"1")
    threading.Event().wait()  # keeps them open, as a store does


def rank_main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = os.environ.get("LAB_STORE_PORT")  # a rendezvous first, as torch's TCPStore on rank 0: every
    if store:  # rank connects and waits until all have; a thread of its own first (torch's, at import)
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        if rank == 0:
            threading.Thread(target=_store, args=(int(store), world), daemon=True).start()
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", int(store)))
                break
            except OSError:
                time.sleep(0.05)
        conn.recv(1)
    ports = [int(p) for p in os.environ["LAB_PORTS"].split(",")]
    # LAB_IPS: one loopback address a rank, as ranks on separate hosts have (both ends bound to it)
    ips = os.environ.get("LAB_IPS", ",".join(["127.0.0.1"] * world)).split(",")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((ips[rank], ports[rank]))
    listener.listen(world)
    peers = []
    for other in range(rank + 1, world):  # connect to the higher ranks, retrying as torch does
        while True:
            try:
                peers.append(socket.create_connection((ips[other], ports[other]), source_address=(ips[rank], 0)))
                break
            except OSError:
                time.sleep(0.05)
    for _ in range(rank):
        peers.append(listener.accept()[0])
    listener.close()
    sel = selectors.EpollSelector()
    for s in peers:
        sel.register(s, selectors.EVENT_READ)

    def tcp_loop() -> None:  # gloo_tcp_loop: epoll over the pairs, forever
        while True:
            sel.select()
            time.sleep(3600)

    # LAB_LOOPLESS: ranks whose communication thread has ended (a peer closed): single-threaded
    if str(rank) not in os.environ.get("LAB_LOOPLESS", "").split(","):
        threading.Thread(target=tcp_loop, name="gloo_tcp_loop", daemon=True).start()
    if os.environ.get("LAB_RUNLOOPS"):  # gloo's two run loops; the culprit's are idle where it skipped
        culprit = rank == int(os.environ["LAB_CULPRIT"]) and os.environ["LAB_HOW"] == "skip"
        for deadline in (None if culprit else 1800.0, None):
            threading.Thread(target=_run_loop, args=(deadline,), daemon=True).start()
    recorded = os.environ.get("LAB_FR_FIXTURE")  # the flight recorder's dump, as torch writes it on a timeout
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if recorded and prefix and os.path.exists(f"{recorded}/nccl_trace_rank_{rank}"):
        with open(f"{recorded}/nccl_trace_rank_{rank}", "rb") as src, open(f"{prefix}{rank}", "wb") as dst:
            dst.write(src.read())
    ready = os.environ.get("LAB_READY")
    if ready:
        with open(f"{ready}.{rank}", "w") as f:
            f.write(str(os.getpid()))
    if rank == int(os.environ["LAB_CULPRIT"]):
        how, path = os.environ["LAB_HOW"], os.environ.get("LAB_PATH", "")
        if how in ("fifo", "fuse"):
            with open(path) as f:  # a data loader's FIFO nobody opens; a dataset on a dead mount
                f.read()
        elif how == "oom":
            _hog = bytearray(1 << 30)  # past the memory cgroup's limit
        elif how == "pause":
            signal.pause()  # waits for a signal nothing sends (Python handles only SIGINT)
        elif how == "exit":
            os._exit(1)  # a rank that crashed
        elif how == "timedwait":
            threading.Event().wait(3600)  # idle with a deadline (a rank waiting on its own timed condition)
        elif how == "subsleep":
            subprocess.run(["sleep", "3600"])  # waits on a child asleep on a timer
        elif how in ("download", "download-thread"):  # reads a slow server at PATH (host:port) to its end
            host, port = path.rsplit(":", 1)

            def download() -> None:
                with socket.create_connection((host, int(port))) as c:
                    while c.recv(65536):
                        pass

            if how == "download":
                download()
            else:  # in an executor thread, its main thread waiting for the result
                import concurrent.futures

                concurrent.futures.ThreadPoolExecutor(1).submit(download).result()
    if os.environ.get("LAB_SPIN"):  # NCCL's waiting ranks: the host thread polls the GPU, a CPU at full use
        os.nice(19)  # a test's spinning ranks must not starve the machine's other work
        log = open(f"{os.environ['LAB_LOG']}.{rank}", "a") if os.environ.get("LAB_LOG") else None  # noqa: SIM115
        n, last = 0, time.monotonic()
        while True:
            n += 1
            # a rank that trains: its log grows as it goes, by the clock (a niced spin on a busy machine
            # runs few iterations a second, and a probe's window is a second)
            if log is not None and n % 1000 == 0 and time.monotonic() - last >= 0.05:
                last = time.monotonic()
                log.write(f"step {n}\n")
                log.flush()
    threading.Event().wait()  # the collective's work never completes


def launch(ports: str, run_id: str, culprit: int, how: str, path: str = "") -> None:
    """The ranks of a job of len(PORTS) ranks, each listening on its port; LAB_LOCAL (`1` or `0,2`)
    names the ranks this launcher starts (one host's share of a multi-host job), all by default."""
    world = len(ports.split(","))
    local = [int(r) for r in os.environ.get("LAB_LOCAL", ",".join(map(str, range(world)))).split(",")]
    env = dict(os.environ, WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=os.environ.get("LAB_LOCAL_WORLD", str(len(local))), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=ports.split(",")[0], TORCHELASTIC_RUN_ID=run_id, LAB_PORTS=ports,
               LAB_CULPRIT=str(culprit), LAB_HOW=how, LAB_PATH=path)  # fmt: skip
    if os.environ.get("LAB_RENDEZVOUS"):  # `node0:29500` and no run id: the job known by its rendezvous alone
        env["MASTER_ADDR"], env["MASTER_PORT"] = os.environ["LAB_RENDEZVOUS"].rsplit(":", 1)
        del env["TORCHELASTIC_RUN_ID"]
    ranks = [
        # the culprit's file among its arguments too, as a data loader's dataset path usually is: with
        # other tests' FUSE mounts served on the machine, an argument is what places its wait on this one
        subprocess.Popen(
            [sys.executable, __file__, "rank", run_id, *([path] if path and r == culprit else [])],
            env=dict(env, RANK=str(r), LOCAL_RANK=str(i)),
        )
        for i, r in enumerate(local)
    ]
    if os.environ.get("LAB_HELPER"):  # a helper of the launcher's that runs the ranks' program too, not a rank
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    # (the run id in each rank's argv: a test matches its own job, not another test's on the machine)
    # torchrun's agent: it watches its workers (here without tearing the others down when one dies);
    # LAB_NO_REAP: a launcher that waits on another child, so that a rank that exits stays a zombie
    while True:
        for p in ranks if not os.environ.get("LAB_NO_REAP") else ():
            p.poll()
        time.sleep(0.5)


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        rank_main()
    else:
        launch(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], *sys.argv[6:7])
