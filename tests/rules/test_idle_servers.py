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

from tests.helpers import children_of, proc_state, proc_wchan, vastprobe_json, wait_for

NGINX_CONF = """
daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok\\n"; }} }}
}}
"""

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


def start_nginx(reap, d: Path) -> tuple[int, list[Path]]:
    if shutil.which("nginx") is None:
        pytest.skip("nginx is not installed here (CI installs it)")
    port = free_port()
    (d / "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
    srv = subprocess.Popen(["nginx", "-p", str(d), "-e", str(d / "error.log"), "-c", str(d / "nginx.conf")],
                           start_new_session=True, stderr=subprocess.DEVNULL)  # fmt: skip
    reap.append(srv)
    wait_for(lambda: any(proc_wchan(k) in ("do_epoll_wait", "ep_poll") for k in children_of(srv.pid)),
             what="nginx's worker waiting")  # fmt: skip
    return srv.pid, [d / "access.log", d / "error.log"]


def start_prefork(reap, d: Path) -> tuple[int, list[Path]]:
    log = d / "server.log"
    srv = subprocess.Popen([sys.executable, "-c", PREFORK, str(log)], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    reap.append(srv)
    assert srv.stdout is not None
    port = int(srv.stdout.readline())
    wait_for(lambda: any(proc_wchan(k) in ("do_epoll_wait", "ep_poll") for k in children_of(srv.pid)),
             what="the worker waiting")  # fmt: skip
    ask(port)
    return srv.pid, [log]


@pytest.mark.parametrize("server", ["nginx", "prefork"])
@pytest.mark.parametrize("worker", ["idle", "stopped"])
def test_an_idle_prefork_server_with_a_quiet_log_is_healthy(reap, tmp_path: Path, server: str, worker: str) -> None:
    master, logs = (start_nginx if server == "nginx" else start_prefork)(reap, tmp_path)
    if server == "nginx":
        ask(int((tmp_path / "nginx.conf").read_text().split("listen 127.0.0.1:")[1].split(";")[0]))
    old = time.time() - 600
    for log in logs:
        os.utime(log, (old, old))  # served once, then ten minutes with no request
    [kid] = children_of(master)
    if worker == "stopped":
        os.kill(kid, signal.SIGSTOP)
        wait_for(lambda: proc_state(kid) == "T", what="the worker stopped")
    rc, host = vastprobe_json("--pid", str(master), "--sample", "0.5")
    errors = [(f["rule"], f["summary"]) for f in host["findings"] if f["severity"] in ("error", "critical")]
    if worker == "stopped":  # the control: a stopped worker serves nobody, its log quiet or not
        assert errors and host["verdict"] == "stalled" and rc == 1, host["findings"]
        os.kill(kid, signal.SIGCONT)
        return
    assert not errors and host["verdict"] == "healthy" and rc == 0, host["findings"]
