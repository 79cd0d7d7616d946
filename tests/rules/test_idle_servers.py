"""An idle pre-fork server whose log has been quiet for minutes: nobody asks, so nothing is written.
An idle nginx (`--pid` of its master) read STALLED, exit 1, once its access log was 5 minutes old:
"nginx waits on nginx (its worker), which makes no progress" and the log an error (found by a
helper). Its worker waits in epoll with no timeout on its listening socket, the master for its
workers. Real nginx where installed, and a Python pre-fork server that looks the same to /proc;
the control stops the worker: STALLED."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import (
    children_of,
    compiled_c,
    nginx_conf,
    proc_state,
    proc_wchan,
    stat_fields,
    vastprobe_json,
    wait_for,
)

#: A master that forks one worker and waits for it; the worker serves from an epoll loop with no
#: timeout (nginx's shape); both hold the log open
PREFORK = r"""
import os, selectors, socket, sys
log = open(sys.argv[1], "a")
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
if os.fork() == 0:
    sel = selectors.EpollSelector(); sel.register(s, selectors.EVENT_READ)
    while True:
        for _ in sel.select():
            c, _a = s.accept(); c.recv(100); c.sendall(b"ok\n"); c.close(); log.write("served\n"); log.flush()
os.wait()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert c.recv(100)


#: How the server is started: itself, or under a launcher that waits for it (`timeout 300 nginx`, a
#: shell script that runs it and then says it exited)
LAUNCHERS = {"none": [], "timeout": ["timeout", "300"], "bash": ["bash", "-c", '"$@"; echo "server exited"', "run"]}


def _master(reap, srv: subprocess.Popen, launcher: str) -> int:
    """The server's master: the process started, or the launcher's one child."""
    reap.append(srv)
    if launcher == "none":
        return srv.pid
    wait_for(lambda: len(children_of(srv.pid)) == 1, what="the launcher's server")
    return children_of(srv.pid)[0]


def start_nginx(reap, d: Path, launcher: str = "none") -> tuple[int, list[Path]]:
    if shutil.which("nginx") is None:
        pytest.skip("nginx is not installed here (CI installs it)")
    port = free_port()
    server = f'server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok\\n"; }} }}'
    (d / "nginx.conf").write_text(nginx_conf(d, server, access_log=f"{d}/access.log"))
    argv = [*LAUNCHERS[launcher], "nginx", "-p", str(d), "-e", str(d / "error.log"), "-c", str(d / "nginx.conf")]
    master = _master(reap, subprocess.Popen(argv, start_new_session=True, stderr=subprocess.DEVNULL), launcher)
    wait_for(lambda: any(proc_wchan(k) in ("do_epoll_wait", "ep_poll") for k in children_of(master)),
             what="nginx's worker waiting")  # fmt: skip
    return master, [d / "access.log", d / "error.log"]


def start_prefork(reap, d: Path, launcher: str = "none") -> tuple[int, list[Path]]:
    log = d / "server.log"
    srv = subprocess.Popen([*LAUNCHERS[launcher], sys.executable, "-c", PREFORK, str(log)], stdout=subprocess.PIPE,
                           text=True, start_new_session=True)  # fmt: skip
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    master = _master(reap, srv, launcher)
    wait_for(lambda: any(proc_wchan(k) in ("do_epoll_wait", "ep_poll") for k in children_of(master)),
             what="the worker waiting")  # fmt: skip
    ask(port)
    return master, [log]


@pytest.mark.parametrize("server", ["nginx", "prefork"])
@pytest.mark.parametrize("worker", ["idle", "stopped"])
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_an_idle_prefork_server_with_a_quiet_log_is_healthy(reap, tmp_path: Path, server: str, worker: str,
                                                            launcher: str) -> None:  # fmt: skip
    """Under a launcher (`timeout 300 nginx`, a shell script), scoped to the launcher, the idle nginx
    read STALLED, exit 1: "timeout and nginx wait on nginx, which makes no progress", beside its quiet
    access log (found by a helper). The launcher waits on its child, the server: no more a stall than
    the server is."""
    master, logs = (start_nginx if server == "nginx" else start_prefork)(reap, tmp_path, launcher)
    top = master if launcher == "none" else int((stat_fields(master) or ["", "0"])[1])  # the launcher
    if server == "nginx":
        ask(int((tmp_path / "nginx.conf").read_text().split("listen 127.0.0.1:")[1].split(";")[0]))
    old = time.time() - 600
    for log in logs:
        os.utime(log, (old, old))  # served once, then ten minutes with no request
    [kid] = children_of(master)
    if worker == "stopped":
        os.kill(kid, signal.SIGSTOP)
        wait_for(lambda: proc_state(kid) == "T", what="the worker stopped")
    rc, host = vastprobe_json("--pid", str(top), "--sample", "0.5")
    errors = [(f["rule"], f["summary"]) for f in host["findings"] if f["severity"] in ("error", "critical")]
    if worker == "stopped":  # the control: a stopped worker serves nobody, its log quiet or not
        assert errors and host["verdict"] == "stalled" and rc == 1, host["findings"]
        os.kill(kid, signal.SIGCONT)
        return
    assert not errors and host["verdict"] == "healthy" and rc == 0, host["findings"]


#: A launcher's shape (the `java` launcher's): the main thread creates the thread that runs the program
#: and joins it (pthread_join: a futex wait on that thread's id); that thread listens and accepts, a
#: pool of workers waits on a condition. `deadlock` as the 3rd argument: the joined thread locks a mutex
#: twice and another thread accepts (the control: a server thread is no proof the job serves); `ticking`:
#: a thread wakes every 50 ms and works 5 ms (a JVM's periodic task and JIT threads: its CPU moves).
LAUNCHER_C = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static int lfd;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static void *pool(void *a) { pthread_mutex_lock(&m); for (;;) pthread_cond_wait(&c, &m); return a; }
static void *serve(void *a) { for (;;) { int s = accept(lfd, 0, 0); if (s >= 0) { write(s, "ok\n", 3); close(s); } } return a; }
static void *stuck(void *a) { pthread_mutex_t x = PTHREAD_MUTEX_INITIALIZER; pthread_mutex_lock(&x); pthread_mutex_lock(&x); return a; }
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *tick(void *a) {
    struct timespec nap = {0, 50000000};
    for (;;) { nanosleep(&nap, 0); double t0 = cpu(); while (cpu() - t0 < 0.005) {} }
    return a;
}
int main(int argc, char **argv) {
    FILE *log = fopen(argv[1], "a");
    struct sockaddr_in sa; socklen_t n = sizeof sa;
    memset(&sa, 0, sizeof sa); sa.sin_family = AF_INET; sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 16) || getsockname(lfd, (struct sockaddr *)&sa, &n)) return 2;
    fprintf(log, "listening\n"); fflush(log);
    pthread_t t, w[4];
    for (int i = 0; i < 4; i++) pthread_create(&w[i], 0, pool, 0);
    if (argc > 2 && !strcmp(argv[2], "deadlock")) { pthread_create(&w[0], 0, serve, 0); pthread_create(&t, 0, stuck, 0); }
    else pthread_create(&t, 0, serve, 0);
    if (argc > 2 && !strcmp(argv[2], "ticking")) pthread_create(&w[1], 0, tick, 0);
    printf("%d\n", ntohs(sa.sin_port)); fflush(stdout);
    pthread_join(t, 0);
    return 0;
}
"""

#: The same shape in Java: `java Srv.java` (the launcher joins the JVM's main thread, which accepts)
SERVER_JAVA = """
import java.io.*; import java.net.*; import java.util.concurrent.*;
public class Srv {
  public static void main(String[] a) throws Exception {
    PrintWriter log = new PrintWriter(new FileWriter(a[0], true), true);
    ExecutorService pool = Executors.newFixedThreadPool(4);
    ServerSocket s = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"));
    log.println("listening"); System.out.println(s.getLocalPort()); System.out.flush();
    while (true) { Socket c = s.accept(); pool.submit(() -> { try { c.getOutputStream().write("ok\\n".getBytes()); c.close(); } catch (IOException e) {} }); }
  }
}
"""


def _accepting_thread(pid: int) -> bool:
    return any((Path(t) / "wchan").read_text() == "inet_csk_accept" for t in Path(f"/proc/{pid}/task").glob("*"))


@pytest.mark.parametrize("server", ["java", "launcher", "ticking", "deadlock"])
@pytest.mark.parametrize("named", [False, True], ids=["found", "named"])
def test_a_server_that_accepts_in_the_thread_its_launcher_joins_is_idle(reap, tmp_path: Path, server: str,
                                                                         named: bool) -> None:  # fmt: skip
    """An idle Java server (the `java` launcher's main thread joins the JVM's main thread, which
    accepts) read STALLED, exit 1, once its log was 5 minutes old: "java is alive but makes no
    progress: asleep in futex_do_wait" (found by a helper). Real Java where installed (CI installs
    no JDK: too heavy) and a C launcher that looks the same to /proc; the control joins a thread that
    deadlocked itself while another accepts: STALLED."""
    log = tmp_path / "server.log"
    if server == "java":
        if shutil.which("java") is None:
            pytest.skip("java is not installed here (CI installs no JDK)")
        (tmp_path / "Srv.java").write_text(SERVER_JAVA)
        argv = ["java", "-Xmx64m", "-XX:+UseSerialGC", str(tmp_path / "Srv.java"), str(log)]
    else:
        argv = [str(compiled_c(tmp_path, "launcher", LAUNCHER_C, "-pthread")), str(log)]
        argv += [server] if server in ("deadlock", "ticking") else []
    srv = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    wait_for(lambda: _accepting_thread(srv.pid), timeout=60, what="a thread in accept()")
    if server == "deadlock":
        wait_for(lambda: sum(1 for t in Path(f"/proc/{srv.pid}/task").glob("*")) == 7, what="all threads")
    else:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                assert c.recv(10) == b"ok\n"
    old = time.time() - 600
    os.utime(log, (old, old))
    given = ("--log", str(log)) if named else ()
    rc, host = vastprobe_json("--pid", str(srv.pid), "--sample", "0.5", *given)
    found = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if server == "deadlock":  # the control: the thread the launcher joins serves nobody
        assert ("no-progress", "error") in [(r, s) for r, s, _ in found], found
        assert host["verdict"] == "stalled" and rc == 1, found
        return
    assert not [f for f in found if f[1] in ("error", "critical")], found
    if named:  # the operator's log is quiet: said, and why (nobody asks), not a stall
        [(_r, sev, summary)] = [f for f in found if f[0] == "missing-logs"]
        assert sev == "warning" and summary.endswith("the job waits for requests"), summary
        assert host["verdict"] == "degraded" and rc == 0, found
    else:
        assert host["verdict"] == "healthy" and rc == 0, found


#: A Python service: a listener thread accepts jobs onto a queue.Queue, a consumer thread takes them,
#: the main thread joins the listener (Thread.join: a lock wait, not pthread_join). `--locked`: no
#: listener, the main thread joins a thread that took a lock twice (the control)
QUEUE_SERVICE = r"""
import queue, socket, sys, threading
q = queue.Queue()
def consumer():
    while True:
        print("done", q.get(), flush=True)
def listener():
    if sys.argv[1:2] == ["--unix"]:
        s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[2]); s.listen()
    else:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    print(s.getsockname(), flush=True)
    while True:
        c, _ = s.accept(); q.put(c.recv(100)); c.close()
def locked():
    lock = threading.Lock(); lock.acquire(); print(0, flush=True); lock.acquire()
threading.Thread(target=consumer, daemon=True).start()
t = threading.Thread(target=locked if sys.argv[1:] == ["--locked"] else listener); t.start(); t.join()
"""


@pytest.mark.parametrize("service", ["listening", "listening-unix", "locked"])
@pytest.mark.parametrize("named", [False, True], ids=["found", "named"])
def test_a_python_service_joining_its_listener_thread_is_not_stalled(reap, tmp_path: Path, service: str,
                                                                      named: bool) -> None:  # fmt: skip
    """A Python service whose main thread joins its listener thread (in accept()) beside a consumer on
    its queue, nobody connecting, its log 10 minutes old: no-progress and missing-logs made it STALLED,
    exit 1 (found by a helper). A thread of it serves and nothing is queued: a warning, 'the job waits
    for requests'. The control has no listener: its main thread joins a thread locked on itself,
    STALLED. Over a Unix socket the listener's accept() sleeps in a datagram wait, as a read does: it
    was taken for one, not an accepting loop."""
    log = tmp_path / "service.log"
    args = {"locked": ["--locked"], "listening-unix": ["--unix", str(tmp_path / "service.sock")]}.get(service, [])
    with log.open("w") as out:
        srv = subprocess.Popen([sys.executable, "-u", "-c", QUEUE_SERVICE, *args],
                               stdout=subprocess.PIPE, stderr=out, text=True, start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    srv.stdout.readline()
    want = {"listening": "inet_csk_accept", "listening-unix": "__skb_wait_for_more_packets"}.get(
        service, "futex_do_wait"
    )
    wait_for(lambda: len(list(Path(f"/proc/{srv.pid}/task").iterdir())) == 3
             and sum(1 for t in Path(f"/proc/{srv.pid}/task").iterdir() if (t / "wchan").read_text() == want) >= 1
             and proc_wchan(srv.pid) == "futex_do_wait", what="the threads waiting")  # fmt: skip
    old = time.time() - 600
    os.utime(log, (old, old))
    rc, host = vastprobe_json("--pid", str(srv.pid), "--sample", "0.5", *(("--log", str(log)) if named else ()))
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if service == "locked":
        assert [f for f in said if f[1] == "error"] and host["verdict"] == "stalled" and rc == 1, said
        return
    assert not [f for f in said if f[1] in ("error", "critical")], said
    [summary] = [f[2] for f in said if f[0] == "missing-logs"]
    assert summary.endswith("the job waits for requests"), summary
    assert host["verdict"] == "degraded" and rc == 0, said


#: A ProcessPoolExecutor behind a small TCP service: its workers wait for tasks (one reads the call
#: queue's pipe, the other waits on the lock they share), its main thread in accept()
POOL_SERVICE = r"""
import concurrent.futures as cf, socket
def work(x):
    return x * 2
if __name__ == "__main__":
    ex = cf.ProcessPoolExecutor(2)
    ex.submit(work, 1).result(); ex.submit(work, 2).result()
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept(); c.sendall(b"%d\n" % ex.submit(work, int(c.recv(100) or 0)).result()); c.close()
"""


@pytest.mark.parametrize("workers", ["idle", "stopped"])
@pytest.mark.parametrize("named", [False, True], ids=["found", "named"])
def test_a_process_pool_behind_an_idle_server_is_not_stalled(reap, tmp_path: Path, workers: str,
                                                             named: bool) -> None:  # fmt: skip
    """Nobody connects, the log is 10 minutes old: "python3 (worker) waits on python3 (the server),
    which makes no progress", STALLED, exit 1 (found by a helper). A worker of a server, of the same
    program, waiting for its next task (the pipe its server writes, or the lock it shares with its
    siblings) waits for requests too. The control stops a worker: STALLED."""
    log, script = tmp_path / "service.log", tmp_path / "pool_service.py"
    script.write_text(POOL_SERVICE)
    with log.open("w") as err:
        srv = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=err, text=True,
                               start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    srv.stdout.readline()
    wait_for(lambda: proc_wchan(srv.pid) == "inet_csk_accept" and len(children_of(srv.pid)) == 2, what="serving")
    if workers == "stopped":
        os.kill(children_of(srv.pid)[0], signal.SIGSTOP)
        wait_for(lambda: any(proc_state(k) == "T" for k in children_of(srv.pid)), what="a worker stopped")
    old = time.time() - 600
    os.utime(log, (old, old))
    rc, host = vastprobe_json("--pid", str(srv.pid), "--sample", "0.5", *(("--log", str(log)) if named else ()))
    said = [(f["rule"], f["severity"], f["summary"]) for f in host["findings"]]
    if workers == "stopped":
        assert host["verdict"] == "stalled" and rc == 1, said
        for k in children_of(srv.pid):
            os.kill(k, signal.SIGCONT)
        return
    assert not [f for f in said if f[1] in ("error", "critical")], said
    if named:
        [summary] = [f[2] for f in said if f[0] == "missing-logs"]
        assert summary.endswith("the job waits for requests"), summary
        assert host["verdict"] == "degraded" and rc == 0, said
    else:
        assert host["verdict"] == "healthy" and rc == 0, said
