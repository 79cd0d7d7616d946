"""The report as a person sees it: run in a real terminal (tmux) at 80, 120 and 200 columns, in
colour and with NO_COLOR=1, and read back with `capture-pane`. The text on the screen is the
golden text of that width (the terminal's own width, not COLUMNS, decides the wrapping), wrapped
lines keep their indent, and colour is there exactly when NO_COLOR is not."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fixtures.reports.record import golden_path, read_capture
from tests.helpers import wait_for
from tests.paths import REPO


def run_in_tmux(tmp_path: Path, width: int, no_color: bool, case: str = "seed-inside") -> tuple[str, str]:
    """(the screen's text, the screen with its escape sequences) after `vastprobe analyze` ran."""
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux (apt-get install tmux)")
    cap = tmp_path / f"{case}.json"
    cap.write_bytes(read_capture(case))
    status = tmp_path / f"status-{width}-{no_color}"
    sock = tmp_path / f"tmux-{uuid.uuid4().hex[:8]}.sock"
    colour = "NO_COLOR=1" if no_color else ""
    cmd = (f"cd {REPO} && env -u COLUMNS -u LINES -u NO_COLOR -u FORCE_COLOR {colour} TERM=xterm-256color "
           f"{sys.executable} -m vastprobe analyze {cap} --format table; echo $? > {status}; sleep 60")  # fmt: skip
    subprocess.run(["tmux", "-S", str(sock), "new-session", "-d", "-x", str(width), "-y", "120", "-s", "vp", cmd],
                   check=True)  # fmt: skip
    try:
        wait_for(lambda: status.exists() and status.read_text().endswith("\n"), timeout=30, what="the report to finish")
        assert status.read_text().strip() == "1"  # stalled

        def pane(*flags: str) -> str:
            return subprocess.run(["tmux", "-S", str(sock), "capture-pane", "-p", *flags, "-t", "vp", "-S", "0",
                                   "-E", "119"], capture_output=True, text=True, check=True).stdout  # fmt: skip

        return pane(), pane("-e")
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("no_color", [True, False], ids=["NO_COLOR", "colour"])
def test_the_screen_shows_the_golden_text(tmp_path: Path, width: int, no_color: bool) -> None:
    screen, raw = run_in_tmux(tmp_path, width, no_color)
    lines = [line.rstrip() for line in screen.rstrip("\n").splitlines()]
    want = golden_path("seed-inside", width).read_text().rstrip("\n").splitlines()
    assert lines == want
    assert all(line.startswith(" ") for line in lines[1:] if line)  # wrapped lines keep their indent
    assert has_colour(raw) is not no_color  # colour exactly when NO_COLOR is not set (bold is no colour)
    assert "\x1b[1m" in raw  # the terminal got styles at all: the check above can fail


def has_colour(screen: str) -> bool:
    """A foreground colour set anywhere (SGR 30-38, 90-97); 39, the default, is none."""
    for params in re.findall(r"\x1b\[([0-9;]*)m", screen):
        codes = [int(c) for c in params.split(";") if c.isdigit()]
        if any(30 <= c <= 38 or 90 <= c <= 97 for c in codes):
            return True
    return False
