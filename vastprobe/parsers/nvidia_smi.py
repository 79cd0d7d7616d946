"""`nvidia-smi --query-gpu=... --format=csv,noheader,nounits` and `--query-compute-apps=...`.

    0, GPU-5e2c..., NVIDIA H200, 00000000:18:00.0, 0, 0, 1, 143771, 29, 75.12, 0x0000000000000001
Placeholders ([N/A], [Not Supported], ...) are absent values, never zero.
"""

from __future__ import annotations

from vastprobe.model import GpuApp, GpuSample


def _num(text: str) -> float | None:
    t = text.strip()
    if not t or t.startswith("[") or t.upper() in ("N/A", "NA"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _hexmask(text: str) -> int | None:
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def parse_gpu_query(text: str) -> tuple[list[GpuSample], list[str]]:
    """Rows, and the lines that were not rows (error text)."""
    rows, other = [], []
    for line in text.split("\n"):
        if not line.strip():
            continue
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 10 and f[0].isdigit():
            rows.append(
                GpuSample(
                    index=int(f[0]),
                    uuid=f[1],
                    name=f[2],
                    pci_bus_id=f[3],
                    utilization_gpu=_num(f[4]),
                    utilization_memory=_num(f[5]),
                    memory_used_mib=_num(f[6]),
                    memory_total_mib=_num(f[7]),
                    temperature_c=_num(f[8]),
                    power_w=_num(f[9]),
                    clock_event_reasons=_hexmask(f[10]) if len(f) > 10 else None,
                )
            )
        else:
            other.append(line.strip())
    return rows, other


def parse_compute_apps(text: str) -> tuple[list[GpuApp], list[str]]:
    apps, other = [], []
    for line in text.split("\n"):
        if not line.strip():
            continue
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 4 and f[0].isdigit():
            apps.append(GpuApp(pid=int(f[0]), process_name=f[1], used_memory_mib=_num(f[2]), gpu_uuid=f[3]))
        else:
            other.append(line.strip())
    return apps, other


def pci_short(bus_id: str) -> str:
    """`00000000:3B:00.0` and Xid's `0000:3b:00` to one form: `3b:00`... with the domain."""
    b = bus_id.lower().split(".")[0]
    parts = b.split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return b
