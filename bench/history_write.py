"""One run's history write at fleet size, SQLite against PostgreSQL (a private cluster started as
tests/pg_cluster.py does): `HistoryStore.record` of N synthetic hosts, three sweeps, 5% of the
hosts changing state each sweep (the second and third sweeps move every host's current state on).

    .venv/bin/python bench/history_write.py --hosts 20000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import pg_cluster  # noqa: E402
from tests.history.test_store import report  # noqa: E402
from vastprobe.history.store import HistoryStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=20000)
    ap.add_argument("--sweeps", type=int, default=3)
    args = ap.parse_args()
    cluster = pg_cluster.start()
    if isinstance(cluster, str):
        raise SystemExit(f"no PostgreSQL: {cluster}")
    try:
        places: list[str | Path] = [cluster.url(cluster.create_database("write")),
                                    Path(tempfile.mkdtemp()) / "h.sqlite"]  # fmt: skip
        print("| store | sweep | hosts | wall s | vastprobe CPU s |")
        print("|---|---:|---:|---:|---:|")
        for where in places:
            with HistoryStore(where) as store:
                for i in range(args.sweeps):
                    reports = [
                        report(f"root@10.{j // 60000}.{(j // 250) % 240}.{j % 250}:22",
                               *(("stalled", ("stopped-child",)) if (j + i) % 20 == 0 else ("healthy", ())))
                        for j in range(args.hosts)
                    ]  # fmt: skip
                    t, cpu = time.monotonic(), time.process_time()
                    store.record(reports, started_at=1.796e9 + i * 300, finished_at=1.796e9 + i * 300 + 60)
                    name = "PostgreSQL" if isinstance(where, str) else "SQLite"
                    print(f"| {name} | {i + 1} | {args.hosts} | {time.monotonic() - t:.2f} | "
                          f"{time.process_time() - cpu:.2f} |", flush=True)  # fmt: skip
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
