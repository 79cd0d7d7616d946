"""Per-parser cases the fixtures do not hold, plus empty and garbage input for every parser."""

from __future__ import annotations

import pytest

from vastprobe.model import FileStat, Unavailable
from vastprobe.parsers import (
    cgroup,
    cmdline,
    df,
    fd,
    files,
    host,
    kmsg,
    nvidia_smi,
    proc_io,
    proc_stat,
    proc_status,
    wchan,
)

STAT_TAIL = "S 1 5270 5270 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 2 0 4242 1000 50 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"


def test_stat_comm_with_parens_spaces_and_newline() -> None:
    rec = proc_stat.parse_stat(f"5270 (x) R 1 (y z\n) {STAT_TAIL}")
    assert rec.comm == "x) R 1 (y z\n" and rec.state == "S" and rec.ppid == 1
    assert (rec.utime, rec.stime, rec.num_threads, rec.starttime) == (7, 3, 2, 4242)


def test_stat_section_joins_split_records() -> None:
    text = f"/proc/5270/stat:5270 (a\n/proc/5270/stat:b) {STAT_TAIL}\ngrep: /proc/99/stat: No such file or directory\n"
    recs, errors = proc_stat.parse_stat_section(text)
    assert recs[5270].comm == "a\nb"
    assert "No such file" in errors[99]


@pytest.mark.parametrize(
    "bad", ["", "garbage", "12 (x) Q 1 2 3", "12 (x) S a b c d e f g h i j k l m n o p q r s t u v"]
)
def test_stat_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        proc_stat.parse_stat(bad)


def test_status_fields() -> None:
    lines = ["Name:\tpython3", "State:\tD (disk sleep)", "PPid:\t7", "Uid:\t1000\t1000\t1000\t1000",
             "NSpid:\t2616\t1", "VmRSS:\t  1024 kB", "SigIgn:\t0000000000010000", "voluntary_ctxt_switches:\t5"]  # fmt: skip
    st = proc_status.parse_status(lines)
    assert (st.name, st.state, st.ppid, st.uid, st.nspid, st.vm_rss_kb) == ("python3", "D", 7, 1000, (2616, 1), 1024)
    assert st.sig_ign == 1 << 16 and st.voluntary_ctxt == 5


def test_fd_listing_gnu_and_busybox() -> None:
    text = "\n".join(
        [
            "/proc/10/fd:",
            "total 0",
            "lr-x------ 1 0 0 64 Dec  2 16:25 0 -> pipe:[2787]",
            "l-wx------    1 0        0               64 Dec  2 16:25 1 -> /tmp/a -> b.log (deleted)",
            "lrwx------ 1 0 0 64 Dec  2 16:25 12 -> /dev/nvidia0",
            "/proc/11/fd:",
            "@@more",
            "ls: cannot open directory '/proc/12/fd': Permission denied",
        ]
    )
    t = fd.parse_fd_section(text)
    f = t.fds[10]
    assert [(e.fd, e.mode) for e in f] == [(0, "r"), (1, "w"), (12, "rw")]
    assert f[0].pipe_inode == 2787 and f[1].deleted and f[1].path == "/tmp/a -> b.log" and f[2].is_gpu_device
    assert 11 in t.truncated and "Permission denied" in t.denied[12]


def test_cmdline_keeps_argument_boundaries() -> None:
    text = "/proc/5/cmdline:python\n/proc/5/cmdline:-c\n/proc/5/cmdline:a b\x1ec\n"
    assert cmdline.parse_cmdline_section(text) == {5: ("python", "-c", "a b\nc")}


def test_io_and_wchan() -> None:
    io, err = proc_io.parse_io_section(
        "/proc/3/io:rchar: 10\n/proc/3/io:wchar: 20\ngrep: /proc/1/io: Permission denied"
    )
    assert io[3].rchar == 10 and io[3].write_bytes is None and "Permission" in err[1]
    w, _ = wchan.parse_wchan_section("/proc/3/wchan:sigsuspend.isra.0\n/proc/4/wchan:0")
    assert wchan.wchan_family(w[3]) == "sigsuspend" and w[4] == "0"


OOM_LINES = [
    # 6.x (this project's machine)
    "[ 1002.442956] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/vpt,task_memcg=/vpt,task=python3,pid=2115,uid=0",
    "[ 1002.442987] Memory cgroup out of memory: Killed process 2115 (python3) total-vm:221368kB, anon-rss:40576kB, file-rss:2576kB, shmem-rss:0kB, UID:0 pgtables:148kB oom_score_adj:0",
    # 4.19 padded summary
    "[  500.1] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=java,pid= 4242,uid= 1000",
    "[  500.2] Out of memory: Killed process 4242 (java) total-vm:51234567kB, anon-rss:40123456kB, file-rss:1024kB, shmem-rss:0kB",
    # <= 4.18
    "[   99.0] Out of memory: Kill process 35389 (abuse) score 912 or sacrifice child",
    "[   99.1] Killed process 35389 (abuse) total-vm:123kB, anon-rss:1kB, file-rss:0kB",
]


def test_oom_formats_across_kernels() -> None:
    log = kmsg.parse_kmsg_sections("@@source dmesg\n" + "\n".join(OOM_LINES) + "\n@@lines 900\n", None, btime=1_000_000)
    kills = [e for e in log.events if e.kind == "oom-kill"]
    assert [(k.pid, k.comm) for k in kills] == [(2115, "python3"), (4242, "java"), (35389, "abuse")]
    assert kills[0].task_memcg == "/vpt" and kills[0].anon_rss_kb == 40576 and kills[0].uid == 0
    assert kills[0].wall_time == pytest.approx(1_000_000 + 1002.442987)
    assert kills[1].task_memcg == "/user.slice" and kills[1].uid == 1000  # from its oom-kill: summary


XID_LINES = [
    "[ 5.0] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "[ 6.0] NVRM: Xid (PCI:0000:af:00): 13, pid=1234, name=python, Graphics Exception: ESR 0x1",
    "[ 7.0] NVRM: Xid (0000:03:00): 14, Channel 00000001",
    "[ 8.0] NVRM: Xid (PCI:0000:2d:00): 109, pid=619, name=(udev-worker), channel 0x00000001, errorString CTX SWITCH TIMEOUT, Info 0x4000",
]


def test_xid_formats() -> None:
    log = kmsg.parse_kmsg_sections("@@source dmesg\n" + "\n".join(XID_LINES) + "\n@@lines 4\n", None, None)
    x = [(e.xid, e.pci, e.pid) for e in log.events]
    assert x == [(79, "0000:05:00", None), (13, "0000:af:00", 1234), (14, "0000:03:00", None), (109, "0000:2d:00", 619)]


def test_unreadable_kernel_log_is_said_not_silent() -> None:
    log = kmsg.parse_kmsg_sections(
        "@@source dmesg\n@@err dmesg: read kernel buffer failed: Operation not permitted\n@@lines 1\n", None, None
    )
    assert not log.readable and "not permitted" in (log.reason or "")
    fallback = "@@source journalctl\n@@err No journal files were found.\n@@err -- No entries --\n@@lines 2\n"
    both = kmsg.parse_kmsg_sections(
        "@@source dmesg\n@@err dmesg: klogctl: Operation not permitted\n@@lines 1\n", fallback, None
    )
    assert not both.readable and "journalctl" in (both.reason or "")
    empty = kmsg.parse_kmsg_sections("@@source dmesg\n@@lines 0\n", None, None)
    assert not empty.readable and "empty" in (empty.reason or "")


def test_nvidia_smi_placeholders_are_absent_not_zero() -> None:
    rows, other = nvidia_smi.parse_gpu_query(
        "0, GPU-1, NVIDIA H200, 00000000:18:00.0, [N/A], 0, 143771, 143771, 29, [Not Supported], 0x0000000000000001\n"
        'Field "x" is not a valid field to query.\n'
    )
    assert rows[0].utilization_gpu is None and rows[0].utilization_memory == 0 and rows[0].power_w is None
    assert rows[0].clock_event_reasons == 1 and other
    assert nvidia_smi.pci_short("00000000:3B:00.0") == "0000:3b:00" == nvidia_smi.pci_short("0000:3b:00")
    apps, _ = nvidia_smi.parse_compute_apps("4242, python3, 80000, GPU-1\n")
    assert apps[0].pid == 4242 and apps[0].used_memory_mib == 80000


def test_cgroup_v2_counters() -> None:
    m = "M\tv2\t/job\t/sys/fs/cgroup/job\n"
    c = "\n".join(
        [
            "/sys/fs/cgroup/job/memory.events:low 0",
            "/sys/fs/cgroup/job/memory.events:max 12",
            "/sys/fs/cgroup/job/memory.events:oom 2",
            "/sys/fs/cgroup/job/memory.events:oom_kill 1",
            "/sys/fs/cgroup/job/memory.max:1073741824",
            "/sys/fs/cgroup/job/memory.peak:1073700000",
            "/sys/fs/cgroup/job/memory.current:5000",
        ]
    )
    (g,) = cgroup.parse_cgmem(m, c)
    assert (g.version, g.oom_kill, g.oom, g.failcnt, g.limit_bytes, g.peak_bytes) == (
        "v2",
        1,
        2,
        12,
        1073741824,
        1073700000,
    )
    assert cgroup.parse_proc_cgroup_section("/proc/1/cgroup:0::/job\n/proc/1/cgroup:4:memory:/vpt") == {
        1: ("/vpt", "/job")
    }


def test_logstats_and_artifacts() -> None:
    s = files.parse_logstats("@@log 0\n12 1700000000 55\n@@log 1\nstat: cannot statx '/x': No such file or directory\n")
    assert s[0] == FileStat(12, 1700000000, 55)
    assert isinstance(s[1], Unavailable) and "No such file" in s[1].reason
    n, entries, err = files.parse_artifacts("@@count 2\n5 1700000000 regular file|/tmp/a|b\n7 1 directory|/tmp/d\n")
    assert n == 2 and entries[0].path == "/tmp/a|b" and entries[1].kind == "directory" and err is None
    # a listing its bound stopped: the shell says "Killed" once a command; the reason is said once
    n, entries, err = files.parse_artifacts("@@count 150000\n5 1 regular file|/tmp/a\nKilled\nKilled\n")
    assert n == 150000 and len(entries) == 1 and err is not None and err.count("did not finish") == 1, err


PARSERS = [
    lambda t: proc_stat.parse_stat_section(t),
    lambda t: proc_status.parse_status_section(t),
    lambda t: proc_io.parse_io_section(t),
    lambda t: wchan.parse_wchan_section(t),
    lambda t: cmdline.parse_cmdline_section(t),
    lambda t: fd.parse_fd_section(t),
    lambda t: cgroup.parse_proc_cgroup_section(t),
    lambda t: cgroup.parse_cgmem(t, t),
    lambda t: kmsg.parse_kmsg_sections(t, t, None),
    lambda t: nvidia_smi.parse_gpu_query(t),
    lambda t: nvidia_smi.parse_compute_apps(t),
    lambda t: df.parse_df(t),
    lambda t: files.parse_logstats(t),
    lambda t: files.parse_artifacts(t),
    lambda t: host.parse_host(t, host.parse_meta(t)),
    lambda t: host.parse_times(t),
]
GARBAGE = ["", "\n\n", "\x00\xff\x1b[2J", ":::::", "/proc/abc/stat:1 (x", "@@log x\n@@count y\n@@lines z", "M\tv9\t\t"]


@pytest.mark.parametrize("i", range(len(PARSERS)))
@pytest.mark.parametrize("text", GARBAGE)
def test_parsers_survive_empty_and_garbage(i: int, text: str) -> None:
    PARSERS[i](text)  # no exception: a bad input is a recorded fact, never a crash


def test_sched_exit_times_of_zombies_and_a_comm_that_imitates_the_line() -> None:
    from vastprobe.parsers import sched

    text = "\n".join([
        "/proc/40/sched:se.exec_start                                :      31260592.916936",
        "/proc/41/sched:se.exec_start : 9 (41, #threads: 1)",  # a comm named "se.exec_start : 9": the header
        "/proc/41/sched:se.exec_start                                :      31262000.5",
        "/proc/42/sched:se.exec_start                                :      ٣١٢٦٠٥٩٢.٩",  # non-ASCII digits
        "/proc/99/sched:se.exec_start                                :      31265592.916936",
    ])  # fmt: skip
    last = sched.parse_last_ran(text)
    assert last == {40: 31260592.916936, 41: 31262000.5, 99: 31265592.916936}
    ago = sched.exited_ago(last, [40, 41, 42], shell_pid=99)
    assert set(ago) == {40, 41} and abs(ago[40] - 5.0) < 1e-6 and abs(ago[41] - 3.592416936) < 1e-6
    assert sched.exited_ago(last, [40], shell_pid=7) == {}  # no "now": nothing said
