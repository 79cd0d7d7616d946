from __future__ import annotations

import json

import pytest

from vastprobe.targets import InventoryError, expand_ranges, parse_inventory, vast_address


def test_ranges() -> None:
    assert expand_ranges("gpu[01-03]") == ["gpu01", "gpu02", "gpu03"]
    assert expand_ranges("10.0.0.[1-2]:2222") == ["10.0.0.1:2222", "10.0.0.2:2222"]
    assert expand_ranges("n[1-2,7]") == ["n1", "n2", "n7"]
    assert expand_ranges("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_ranges("plain") == ["plain"]
    for bad in ("x[3-1]", "x[1-200000]"):
        with pytest.raises(InventoryError):
            expand_ranges(bad)


def test_plain_inventory() -> None:
    text = "# fleet\nroot@10.0.0.1:2222  # a comment\n\ngpu-box\nnode[1-2]\n[::1]:22\n"
    assert [e.target for e in parse_inventory(text)] == ["root@10.0.0.1:2222", "gpu-box", "node1", "node2", "[::1]:22"]


def test_vast_addresses() -> None:
    direct = {"public_ipaddr": "203.0.113.7 ", "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41234"}]},
              "ssh_host": "ssh4.vast.ai", "ssh_port": 10000}  # fmt: skip
    assert vast_address(direct) == "root@203.0.113.7:41234"
    assert vast_address({"ssh_host": "ssh4.vast.ai", "ssh_port": 10000, "ports": {}}) == "root@ssh4.vast.ai:10000"
    assert (
        vast_address({"ssh_host": "ssh4.vast.ai", "ssh_port": 10000, "image_runtype": "jupyter_direc"})
        == "root@ssh4.vast.ai:10001"
    )


def test_vast_inventory_skips_what_is_not_running() -> None:
    data = [
        {"id": 1, "label": "prover-a", "actual_status": "running", "ssh_host": "h", "ssh_port": 2},
        {"id": 2, "label": None, "actual_status": "exited", "ssh_host": "h", "ssh_port": 3},
        {"id": 3, "actual_status": None},
    ]
    entries = parse_inventory(json.dumps(data))
    assert [(e.target, e.skip is None) for e in entries] == [("root@h:2", True), ("root@h:3", False), ("vast-3", False)]
    assert entries[0].labels == {"instance_id": "1", "label": "prover-a"}
    assert "exited" in (entries[1].skip or "") and "provisioning" in (entries[2].skip or "")
