"""Everything vastprobe writes to stderr goes through `say`: escaped exactly like stdout, since a
line may carry remote words (a vast.ai `ssh_host`, a server's disconnect reason, a target name)
that hold terminal escapes or bidi overrides."""

from __future__ import annotations

import sys
import threading

from vastprobe.untrusted.safe import safe

_said: set[str] = set()
_lock = threading.Lock()


def say(text: str) -> None:
    """One or more lines on stderr, each escaped (a newline inside `text` starts a new line)."""
    out = "".join(safe(line) + "\n" for line in text.split("\n"))
    try:
        sys.stderr.write(out)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing more to say


def say_once(key: str, text: str) -> bool:
    """`say` the first time `key` is seen in this run (a warning that applies to a whole sweep is
    printed once, not once per host). Returns whether it was printed."""
    with _lock:
        if key in _said:
            return False
        _said.add(key)
    say(text)
    return True


def forget() -> None:
    """Tests: start a fresh run."""
    with _lock:
        _said.clear()
