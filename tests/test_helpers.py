"""The tests' own helpers hold on a shared machine: another process may have a name that is not
UTF-8 while the suite runs."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import children_of, descendants, proc_state, stat_fields, wait_for


def test_a_process_named_in_bytes_that_are_not_utf8_breaks_no_helper(reap: list[subprocess.Popen]) -> None:
    """A process anywhere renames itself to bytes that are not UTF-8 (and hold ") "): the helpers
    that read every /proc/*/stat still find a test's children and their states."""
    code = (
        "import sys, time; open('/proc/self/comm', 'wb').write(b'\\xff\\xfe) R 1 (x'); "
        "print('ok', flush=True); time.sleep(600)"
    )
    odd = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    reap.append(odd)
    assert odd.stdout is not None and odd.stdout.readline().strip() == b"ok"
    parent = subprocess.Popen(["sh", "-c", "sleep 600 & wait"], start_new_session=True)
    reap.append(parent)
    wait_for(lambda: len(children_of(parent.pid)) == 1, what="the child")
    (child,) = children_of(parent.pid)
    assert proc_state(child) in ("S", "R") and proc_state(odd.pid) in ("S", "R")
    assert descendants(parent.pid) == [child]
    fields = stat_fields(odd.pid)
    assert fields is not None and int(fields[1]) > 1  # the real PPid, after the name's fake ") R 1 ("
