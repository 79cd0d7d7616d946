"""`nvidia-smi --query-gpu=... --format=csv,nounits` and `--query-compute-apps=...`.

The probe asks with a header line, so columns are found by name, whatever set a driver accepted
and whatever units it prints (`69.85 W` and `69.85` read alike). Output without a header (older
captures, `noheader`) is read by position against the probe's first field list, or against the
field list a caller names. Placeholders (`[N/A]`, `[Not Supported]`, `N/A`, `[Unknown Error]`,
`[Requested functionality has been deprecated]`) are absent values, named per field in
`GpuSample.unavailable`, never zero.

    index, uuid, name, pci.bus_id, utilization.gpu [%], ..., clocks_event_reasons.active
    0, GPU-5e2c..., NVIDIA H200, 00000000:18:00.0, 0, ..., 0x0000000000000001

`build_gpus` gives the snapshot its `gpus` from every sample's query and the gpuapps section.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vastprobe.model import GpuApp, GpuSample, GpuState, Unavailable
from vastprobe.probe import sources as src
from vastprobe.untrusted.numbers import read_float, read_hex, read_int

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections

#: The probe's first query set (before it asked with a header): captures made then are read by position.
LEGACY_GPU_FIELDS = (
    "index", "uuid", "name", "pci.bus_id", "utilization.gpu", "utilization.memory", "memory.used",
    "memory.total", "temperature.gpu", "power.draw", "clocks_event_reasons.active",
)  # fmt: skip
LEGACY_APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
MAX_LINE = 8192  # a row of every field nvidia-smi knows is ~4 KiB


def _float(t: str) -> float | None:
    return read_float(t.split(" ", 1)[0])


def _int(t: str) -> int | None:
    return read_int(t.split(" ", 1)[0])


def _yes_no(t: str) -> bool | None:
    return {"yes": True, "no": False}.get(t.strip().lower())


def _text(t: str) -> str:
    return t


# nvidia-smi field (and the names its header may print instead) -> (GpuSample attribute, reader)
_GPU_COLUMNS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "index": ("index", _int),
    "uuid": ("uuid", _text),
    "name": ("name", _text),
    "pci.bus_id": ("pci_bus_id", _text),
    "utilization.gpu": ("utilization_gpu", _float),
    "utilization.memory": ("utilization_memory", _float),
    "memory.used": ("memory_used_mib", _float),
    "memory.total": ("memory_total_mib", _float),
    "temperature.gpu": ("temperature_c", _float),
    "power.draw": ("power_w", _float),
    "power.limit": ("power_limit_w", _float),
    "enforced.power.limit": ("power_limit_w", _float),
    "clocks.sm": ("sm_clock_mhz", _float),
    "clocks.current.sm": ("sm_clock_mhz", _float),
    "clocks.max.sm": ("sm_clock_max_mhz", _float),
    "clocks.max.sm_clock": ("sm_clock_max_mhz", _float),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected_volatile", _int),
    "remapped_rows.pending": ("remapped_rows_pending", _yes_no),
    "remapped_rows.failure": ("remapped_rows_failure", _yes_no),
    "retired_pages.pending": ("retired_pages_pending", _yes_no),
    "pcie.link.gen.current": ("pcie_gen", _int),
    "pcie.link.gen.max": ("pcie_gen_max", _int),
    "pcie.link.width.current": ("pcie_width", _int),
    "pcie.link.width.max": ("pcie_width_max", _int),
    "mig.mode.current": ("mig_mode", _text),
    "clocks_event_reasons.active": ("clock_event_reasons", read_hex),
    "clocks_throttle_reasons.active": ("clock_event_reasons", read_hex),
}
_APP_COLUMNS = {
    "pid": "pid",
    "process_name": "process_name",
    "used_memory": "used_memory_mib",
    "used_gpu_memory": "used_memory_mib",
    "gpu_uuid": "gpu_uuid",
}
_REQUIRED_TEXT = ("uuid", "name", "pci_bus_id")
_UNIT = re.compile(r" \[[^\]]{0,16}\]$")
_HANDLE = re.compile(r"Unable to determine the device handle for (GPU[^:]{0,16}):?\s?(.{0,200})")
_BUS = re.compile(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.[0-7]")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line[:MAX_LINE].split(",")]


def _header(cells: list[str]) -> list[str] | None:
    """Field names, when this line is nvidia-smi's header (units dropped)."""
    names = [_UNIT.sub("", c).strip().lower() for c in cells]
    if names and names[0] in ("index", "pid", "uuid", "name", "pci.bus_id", "process_name", "gpu_uuid", "timestamp"):
        return names
    return None


def _missing(text: str) -> bool:
    t = text.strip()
    return not t or (t.startswith("[") and t.endswith("]")) or t.upper() in ("N/A", "NA")


def _gpu_row(columns: Sequence[str], cells: list[str], ordinal: int) -> GpuSample | None:
    """One GPU's row. A query without `index` (one GPU asked for with `-i`) numbers rows in order."""
    if len(cells) != len(columns):
        return None
    values: dict[str, Any] = {} if "index" in columns else {"index": ordinal}
    unavailable: list[tuple[str, str]] = []
    for name, cell in zip(columns, cells, strict=True):
        spec = _GPU_COLUMNS.get(name)
        if spec is None:
            continue
        attr, reader = spec
        if _missing(cell):
            unavailable.append((name, cell or "(empty)"))
            values.setdefault(attr, None)
            continue
        value = reader(cell)
        if value is None and attr not in ("mig_mode",):
            unavailable.append((name, cell[:80]))
        if values.get(attr) is None:
            values[attr] = value
    if not isinstance(values.get("index"), int):
        return None
    for attr in _REQUIRED_TEXT:
        values[attr] = values.get(attr) or ""
    kwargs: dict[str, Any] = {k: values.get(k) for k in GpuSample.__dataclass_fields__ if k != "unavailable"}
    return GpuSample(**kwargs, unavailable=tuple(unavailable))


def parse_gpu_query(text: str, fields: Sequence[str] | None = None) -> tuple[list[GpuSample], list[str]]:
    """Rows, and the lines that were not rows (error text, a rejected field list)."""
    rows: list[GpuSample] = []
    other: list[str] = []
    columns: Sequence[str] = [f.lower() for f in fields] if fields else LEGACY_GPU_FIELDS
    for line in text.split("\n"):
        if not line.strip():
            continue
        cells = _cells(line)
        head = _header(cells)
        if head is not None:
            columns = head
            continue
        row = _gpu_row(columns, cells, len(rows))
        if row is None and not fields and columns is LEGACY_GPU_FIELDS and len(cells) == len(columns) - 1:
            row = _gpu_row(columns[:-1], cells, len(rows))  # the first probe's set without the reasons mask
        if row is not None:
            rows.append(row)
        else:
            other.append(line.strip()[:400])
    return rows, other


def parse_compute_apps(text: str, fields: Sequence[str] | None = None) -> tuple[list[GpuApp], list[str]]:
    apps: list[GpuApp] = []
    other: list[str] = []
    columns: Sequence[str] = [f.lower() for f in fields] if fields else LEGACY_APP_FIELDS
    for line in text.split("\n"):
        if not line.strip():
            continue
        cells = _cells(line)
        head = _header(cells)
        if head is not None:
            columns = head
            continue
        values: dict[str, str] = {}
        if len(cells) > len(columns) and "process_name" in columns:  # a name that holds commas
            at = list(columns).index("process_name")
            extra = len(cells) - len(columns)
            cells = [*cells[:at], ", ".join(cells[at : at + extra + 1]), *cells[at + extra + 1 :]]
        if len(cells) == len(columns):
            values = {_APP_COLUMNS[c]: v for c, v in zip(columns, cells, strict=True) if c in _APP_COLUMNS}
        pid = read_int(values.get("pid"))
        if pid is None:
            other.append(line.strip()[:400])
            continue
        mem = values.get("used_memory_mib", "")
        apps.append(
            GpuApp(
                pid=pid,
                process_name=values.get("process_name", ""),
                used_memory_mib=None if _missing(mem) else _float(mem),
                gpu_uuid=values.get("gpu_uuid", ""),
            )
        )
    return apps, other


def unreachable_gpus(lines: Sequence[str]) -> list[str]:
    """GPUs nvidia-smi could not open: `Unable to determine the device handle for GPU0000:3B:00.0:
    Unknown Error` (older drivers) or `... for GPU1: 0000:34:00.0: Unknown Error` (newer)."""
    out = []
    for line in lines:
        m = _HANDLE.search(line)
        if m is None:
            continue
        bus = _BUS.search(m.group(0))
        out.append(pci_short(bus.group(0)) if bus else m.group(1))
    return out


def pci_short(bus_id: str) -> str:
    """`00000000:3B:00.0` and Xid's `0000:3b:00` to one form: `0000:3b:00`."""
    b = bus_id.lower().split(".")[0]
    parts = b.split(":")
    if len(parts) == 3:
        domain = read_hex(parts[0])
        if domain is not None:
            return f"{domain:04x}:{parts[1]}:{parts[2]}"
    return b


def _device_nodes(text: str) -> tuple[tuple[str, ...] | None, str]:
    """`@@dev /dev/nvidia0` lines (and `@@devs N`) ahead of the compute-apps output; older
    probes wrote none (None: not looked at)."""
    nodes: list[str] = []
    seen = False
    rest = text
    while rest.startswith("@@dev"):
        line, _, rest = rest.partition("\n")
        seen = True
        if line.startswith("@@dev "):
            nodes.append(line[6:200])
    return (tuple(nodes) if seen else None), rest


def build_gpus(sections: Sections) -> GpuState:
    """Each sample's nvidia-smi query, the device nodes and the compute apps; `present` False where
    the target has no nvidia-smi."""
    samples: list[tuple[GpuSample, ...]] = []
    errors: list[str] = []
    unreachable: list[str] = []
    exit_code: int | None = None
    present = True
    for n in src.SAMPLES:
        sec = sections.get(src.GPU, n)
        if sec is None:
            continue
        if sec.text.startswith("@@absent"):
            present = False
            break
        if sec.text.startswith("@@skipped"):
            errors.append("nvidia-smi skipped: " + sec.text[10:].strip())
            continue
        rows, other = sections.read(src.GPU, sec.text, n=n)
        lost = sections.read(src.GPU, other, n=n, parser=unreachable_gpus)
        unreachable.extend(x for x in lost if x not in unreachable)
        if sec.rc not in (0, None) and not (rows and lost):  # some GPUs answered: gpu-missing names the rest
            exit_code = sec.rc
            timed_out = sec.rc in (124, 137)
            text = " ".join(other) or "no output"
            errors.append(f"nvidia-smi {'timed out' if timed_out else f'exited {sec.rc}'}: {text}")
        elif sec.rc is None:
            errors.append("nvidia-smi output was cut short")
        if rows:
            samples.append(tuple(rows))
    apps: tuple[GpuApp, ...] | Unavailable = Unavailable("nvidia-smi not run")
    sec = sections.get(src.GPUAPPS)
    nodes, apps_text = sections.read(src.GPUAPPS, sec.text, parser=_device_nodes) if sec is not None else (None, "")
    if present and sec is not None:
        if apps_text.startswith("@@"):
            apps = Unavailable(apps_text[2:].strip())
        elif sec.rc == 0:
            apps = tuple(sections.read(src.GPUAPPS, apps_text)[0])
        else:
            apps = Unavailable(f"nvidia-smi --query-compute-apps exited {sec.rc}")
    if not present:
        return GpuState(
            present=False,
            error=None,
            exit_code=None,
            samples=(),
            apps=Unavailable("no nvidia-smi on the target"),
            device_nodes=nodes,
        )
    error = errors[0] if errors else None
    return GpuState(
        present=True,
        error=error,
        exit_code=exit_code,
        samples=tuple(samples),
        apps=apps,
        unreachable=tuple(unreachable),
        device_nodes=nodes,
    )
