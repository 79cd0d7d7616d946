"""Golden tests over real nvidia-smi outputs published by others: query-gpu and compute-apps CSV of
six GPU models (two with MIG), and the error lines nvidia-smi prints when it cannot open a GPU."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.paths import REPO

_spec = importlib.util.spec_from_file_location("nvidia_smi_expected", REPO / "fixtures" / "nvidia-smi" / "expected.py")
assert _spec and _spec.loader
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
HERE, capture_files, cases, parse_file = _mod.HERE, _mod.capture_files, _mod.cases, _mod.parse_file

FILES = [(c, f.name) for c in cases() for f in capture_files(c)]


@pytest.mark.parametrize(("case", "name"), FILES, ids=[f"{c}/{n}" for c, n in FILES])
def test_capture_parses_to_expected(case: str, name: str) -> None:
    got = json.loads(json.dumps(parse_file(HERE / case / name), sort_keys=True))
    assert got == json.loads((HERE / case / "expected.json").read_text())[name]


@pytest.mark.parametrize("case", cases())
def test_case_names_its_source(case: str) -> None:
    assert (
        "Source:" in (HERE / case / "NOTE.md").read_text() or "capture corpus" in (HERE / case / "NOTE.md").read_text()
    )


def rows(case: str, name: str) -> list[dict]:
    return parse_file(HERE / case / name)["rows"]


def test_six_models_errors_and_mig() -> None:
    models = {r["name"] for c, n in FILES for r in parse_file(HERE / c / n).get("rows", [])}
    assert len(models) >= 6, models
    assert any(r["mig_mode"] == "Enabled" for c, n in FILES for r in parse_file(HERE / c / n).get("rows", []))
    assert sum(bool(parse_file(HERE / c / n).get("unreachable")) for c, n in FILES) >= 4


def test_every_probe_field_is_read_from_a_datacenter_gpu() -> None:
    (idle,) = rows("h100-80gb-hbm3-590", "query-gpu.idle.csv")
    assert (idle["power_w"], idle["power_limit_w"], idle["sm_clock_mhz"], idle["sm_clock_max_mhz"]) == (
        69.85,
        700.0,
        345.0,
        1980.0,
    )
    assert (idle["pcie_gen"], idle["pcie_gen_max"], idle["pcie_width"], idle["pcie_width_max"]) == (5, 5, 16, 16)
    assert idle["ecc_uncorrected_volatile"] == 0 and idle["remapped_rows_pending"] is False
    assert idle["clock_event_reasons"] == 1 and idle["utilization_gpu"] == 0
    assert ["retired_pages.pending", "[N/A]"] in idle["unavailable"]


def test_mig_utilization_is_not_available_not_zero() -> None:
    for state in ("idle", "load"):
        (r,) = rows("h100-mig-590", f"query-gpu.{state}.csv")
        assert r["mig_mode"] == "Enabled" and r["utilization_gpu"] is None
        assert ["utilization.gpu", "[N/A]"] in r["unavailable"]


def test_consumer_gpu_fields_not_supported() -> None:
    (r,) = rows("rtx-4080-super-595", "query-gpu.idle.csv")
    assert r["ecc_uncorrected_volatile"] is None and r["remapped_rows_pending"] is None
    assert r["pcie_gen"] == 1 and r["pcie_gen_max"] == 4  # idle: the link drops to gen 1 to save power


def test_headerless_query_read_by_its_field_list() -> None:
    (r,) = rows("gpu-utils-rtx2080-440", "query-gpu.load.csv")
    assert (r["name"], r["utilization_gpu"], r["power_w"], r["power_limit_w"]) == (
        "GeForce RTX 2080",
        86.0,
        176.98,
        200.0,
    )


@pytest.mark.parametrize(
    ("case", "pci"),
    [("err-device-handle-2015", "0000:0b:00"), ("err-device-handle-a100-llava", "0000:4f:00"),
     ("err-device-handle-container-a4000", "0000:65:00"), ("err-gpu-is-lost-owod", "0000:02:00")],
)  # fmt: skip
def test_gpus_nvidia_smi_cannot_open(case: str, pci: str) -> None:
    got = parse_file(HERE / case / "nvidia-smi.txt")
    assert got["rows"] == [] and got["unreachable"] == [pci]


def test_compute_apps_with_units_and_paths() -> None:
    apps = parse_file(HERE / "h100-80gb-hbm3-590" / "compute-apps.load.csv")["apps"]
    assert [(a["pid"], a["process_name"], a["used_memory_mib"]) for a in apps] == [
        (11327, "/root/tools/memhog", 2566.0), (11328, "/root/tools/memhog", 1542.0), (11345, "./gpu_burn", 15690.0)
    ]  # fmt: skip
