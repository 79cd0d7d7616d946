"""NVIDIA Xid catalogue: what each Xid means, whether it points at the application, the driver or the
hardware, and the first response. Each entry names where its words come from (SOURCES); the
mnemonic, meaning and first response follow NVIDIA's Xid catalog, the origin follows NVIDIA's table of
possible causes and the Kubernetes device plugin's list of application Xids (the GPU stays healthy).
Severity is what vastprobe reports while the job runs; an Xid logged before the job started is
context (info)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vastprobe.model import Severity

Origin = Literal["application", "driver", "hardware", "application or driver", "driver or hardware", "report"]

SOURCES: dict[str, str] = {
    "catalog": "NVIDIA, Analyzing Xid Errors with the Xid Catalog (mnemonic, description, immediate action): "
    "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
    "causes": "NVIDIA, Xid Errors, table of possible causes (HW / driver / user application / bus / thermal / "
    "FB corruption): https://docs.nvidia.com/deploy/xid-errors/index.html",
    "device-plugin": "NVIDIA/k8s-device-plugin internal/rm/health.go, applicationErrorXids 13, 31, 43, 45, 68: "
    "application errors, the GPU stays healthy",
    "recovery": "NVIDIA Xid catalog, Xid 154: the driver's recommended recovery action (None, Drain P2P, "
    "Drain and Reset, GPU Reset Required, Node Reboot Required)",
}


@dataclass(frozen=True)
class XidInfo:
    xid: int
    mnemonic: str
    meaning: str
    origin: Origin
    response: str
    severity: Severity
    sources: tuple[str, ...]


_APP = ("catalog", "causes", "device-plugin")
_CAT = ("catalog", "causes")


def _x(xid: int, mnemonic: str, meaning: str, origin: Origin, response: str, sev: Severity, src=_CAT) -> XidInfo:
    return XidInfo(xid, mnemonic, meaning, origin, response, sev, tuple(src))


CATALOGUE: dict[int, XidInfo] = {
    i.xid: i
    for i in (
        _x(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "application or driver",
           "restart the job", "error"),
        _x(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "invalid or corrupted push buffer stream",
           "application or driver", "restart the job", "error"),
        _x(13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception: a kernel faulted (out-of-bounds "
           "access, illegal instruction)", "application", "restart the job; fix the kernel if it repeats",
           "error", _APP),
        _x(25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "invalid or illegal push buffer stream",
           "application or driver", "restart the job", "error"),
        _x(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault: the job touched an "
           "illegal address", "application", "restart the job; fix the access if it repeats", "error", _APP),
        _x(32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream",
           "application or driver", "restart the job", "error"),
        _x(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "driver firmware error", "driver",
           "watch; upgrade the driver if it repeats", "warning"),
        _x(39, "ROBUST_CHANNEL_CE0_ERROR", "copy engine exception", "driver or hardware", "restart the job",
           "error"),
        _x(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing: the channel was torn down "
           "after a fault in the application", "application", "restart the job (it usually follows an "
           "application fault)", "warning", _APP),
        _x(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "graphics engine fault during a context switch", "driver",
           "watch; reset the GPU if it repeats", "warning"),
        _x(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup after earlier errors (the job's "
           "channels were removed)", "application", "look at the Xid logged before it", "warning", _APP),
        _x(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (timeout)", "driver or hardware",
           "reset the GPU", "critical"),
        _x(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error in GPU memory", "hardware",
           "reset the GPU; drain the host if it repeats", "critical"),
        _x(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "auxiliary power is not connected to the GPU board",
           "hardware", "drain the host: check the power cabling", "critical"),
        _x(61, "PMU_BREAKPOINT", "internal micro-controller breakpoint or warning", "driver",
           "watch; reset the GPU if it repeats", "warning"),
        _x(62, "PMU_HALT_ERROR", "internal micro-controller halt", "driver or hardware", "reset the GPU",
           "critical"),
        _x(63, "INFOROM_DRAM_RETIREMENT_EVENT", "a memory row was marked for remapping (or a page for "
           "retirement)", "hardware", "watch the rate; reset the GPU when convenient to activate the remap",
           "info"),
        _x(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "memory row remapping (or page retirement) failed",
           "hardware", "reset the GPU; drain the host if it repeats", "critical"),
        _x(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "video decoder exception", "application", "restart the job",
           "error", _APP),
        _x(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", "application",
           "restart the job", "error"),
        _x(74, "NVLINK_ERROR", "NVLink error", "hardware", "reset the GPU (or reboot); check the NVLink "
           "connections if it repeats", "critical"),
        _x(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "the GPU has fallen off the bus (PCIe link, "
           "power or thermal)", "hardware", "reboot the host; drain it if it repeats", "critical"),
        _x(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "corrupted data sent to the GPU", "driver or hardware",
           "restart the job", "error"),
        _x(92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit (corrected) ECC error rate", "hardware", "watch",
           "info"),
        _x(93, "INFOROM_ERASE_LIMIT_EXCEEDED", "InfoROM wear limit exceeded (non-fatal)", "hardware", "watch",
           "info"),
        _x(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained memory error: only the application that hit it "
           "is affected", "hardware", "restart the job; reset the GPU when convenient", "error"),
        _x(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained memory error: every application on the GPU "
           "is affected", "hardware", "reset the GPU", "critical"),
        _x(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context-switch timeout", "application or driver",
           "reset the GPU", "critical"),
        _x(110, "SEC_FAULT_ERROR", "security fault", "driver or hardware", "reset the GPU", "critical"),
        _x(119, "GSP_RPC_TIMEOUT", "the GSP firmware did not answer the driver", "driver", "reset the GPU; "
           "upgrade the driver if it repeats", "critical"),
        _x(120, "GSP_ERROR", "GSP firmware error", "driver", "reset the GPU", "critical"),
        _x(121, "C2C_ERROR", "chip-to-chip link error", "hardware", "watch", "warning"),
        _x(136, "ALI_TRAINING_FAIL", "NVLink training failed", "hardware", "reset the GPU", "critical"),
        _x(137, "NVLINK_PRIV_ERR", "NVLink privilege error", "driver", "watch", "warning"),
        _x(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecovered ECC error", "hardware", "reset the GPU",
           "critical"),
        _x(143, "GPU_INIT_ERROR", "GPU initialization error", "driver or hardware", "reset the GPU", "critical"),
        _x(144, "NVLINK_SAW_ERROR", "NVLink (SAW) error; the line says Fatal or Nonfatal", "hardware",
           "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(145, "NVLINK_RLW_ERROR", "NVLink (RLW) error; the line says Fatal or Nonfatal", "hardware",
           "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(146, "NVLINK_TLW_ERROR", "NVLink (TLW) error; the line says Fatal or Nonfatal", "hardware",
           "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(147, "NVLINK_TREX_ERROR", "NVLink (TREX) error; the line says Fatal or Nonfatal", "hardware",
           "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink (NVLPW_CTRL) error; the line says Fatal or Nonfatal",
           "hardware", "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(149, "NVLINK_NETIR_ERROR", "NVLink (NETIR) error; the line says Fatal or Nonfatal", "hardware",
           "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(150, "NVLINK_MSE_ERROR", "NVLink (MSE) error; the line says Fatal or Nonfatal", "hardware",
           "reset the GPU when Fatal; watch when Nonfatal", "warning"),
        _x(151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "key rotation error (confidential computing)", "driver",
           "restart the VM", "critical"),
        _x(154, "GPU_RECOVERY_ACTION_CHANGED", "the driver names the recovery another Xid needs", "report",
           "do what the line names (None, Drain P2P, Drain and Reset, GPU Reset Required, Node Reboot "
           "Required)", "warning", ("catalog", "recovery")),
        _x(155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", "driver", "reset the GPU",
           "critical"),
        _x(156, "RESOURCE_RETIREMENT_EVENT", "a GPU resource was retired", "hardware",
           "reset the GPU when convenient", "warning"),
        _x(157, "RESOURCE_RETIREMENT_FAILURE", "GPU resource retirement failed", "hardware",
           "watch; drain the host if it repeats", "warning"),
        _x(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", "driver or hardware", "reset the GPU", "critical"),
    )
}  # fmt: skip

#: Xid 154's recovery actions and what each means for a running job.
RECOVERY_SEVERITY: dict[str, Severity] = {
    "None": "info",
    "Drain P2P": "warning",
    "Drain and Reset": "critical",
    "GPU Reset Required": "critical",
    "Node Reboot Required": "critical",
}


def lookup(xid: int) -> XidInfo:
    return CATALOGUE.get(xid) or XidInfo(
        xid, "?", "not in vastprobe's catalogue", "report", "look it up in NVIDIA's Xid catalog", "warning",
        ("catalog",),
    )  # fmt: skip


def recovery_action(detail: str | None) -> str | None:
    """Xid 154: `GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)` -> "Drain and Reset"."""
    if not detail:
        return None
    at = detail.rfind(" to ")
    if at < 0:
        return None
    tail = detail[at + 4 :]
    o, c = tail.find("("), tail.rfind(")")
    return tail[o + 1 : c] if 0 <= o < c else None


def catalogue_text() -> str:
    """The catalogue as `vastprobe rules gpu-xid` prints it."""
    lines = ["Xid catalogue (severity while the job runs; before the job started: info):", ""]
    for info in CATALOGUE.values():
        lines.append(f"  {info.xid:>3}  {info.severity:<8} {info.origin:<21} {info.meaning}")
        lines.append(f"       {'':<8} {info.mnemonic}; first response: {info.response}")
    lines += ["", "Sources:"]
    lines += [f"  [{key}] {text}" for key, text in SOURCES.items()]
    return "\n".join(lines)
