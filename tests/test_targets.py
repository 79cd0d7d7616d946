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
    assert entries[0].labels == {"instance_id": "1", "label": "prover-a", "vast_status": "running"}
    assert "exited" in (entries[1].skip or "") and "provisioning" in (entries[2].skip or "")


def test_targets_as_people_write_them() -> None:
    from vastprobe.targets import SshTarget, TargetError, parse_target

    assert parse_target("root@10.0.0.1:2222") == SshTarget("root", "10.0.0.1", 2222)
    assert parse_target("ssh://root@host:2222") == SshTarget("root", "host", 2222)
    assert parse_target("ssh://host/") == SshTarget(None, "host", None)
    assert parse_target("[::1]:22") == SshTarget(None, "::1", 22)
    assert parse_target("root@[2001:db8::7]") == SshTarget("root", "2001:db8::7", None)
    assert parse_target("::1") == SshTarget(None, "::1", None)  # bare IPv6: no port
    assert parse_target("fe80::1%eth0") == SshTarget(None, "fe80::1%eth0", None)
    assert parse_target("alice@corp@bastion") == SshTarget("alice@corp", "bastion", None)  # the last @, as ssh
    assert parse_target("[::1]:22").display() == "[::1]:22" and SshTarget("u", "::1", 2).display() == "u@[::1]:2"
    for bad in ("root@", "@host", "host:0", "host:65536", "host:2x", "[::1", "[]:22", "-oProxyCommand=x",
                "a b", "gpu\x1b[2J", "gpu\u202e", "gpu\udcff", "", "ho/st", "ssh://", "[::1]x"):  # fmt: skip
        with pytest.raises(TargetError):
            parse_target(bad)


def test_ranges_are_bounded_before_they_are_built() -> None:
    import time

    from vastprobe.targets import expand_nodeset, expansion_size

    t0 = time.monotonic()
    for bad in ("gpu[0-99999999]", "n[0-999][0-999]", "x[1-9999999999]", "x[-]", "x[3-]"):
        with pytest.raises(InventoryError):
            expand_ranges(bad)
    from vastprobe.targets import TargetError, parse_target

    for odd in ("x[²-3]", "x[1-٣]", "x[]"):  # not ranges at all: kept as text, then refused as targets
        assert expand_ranges(odd) == [odd]
        with pytest.raises(TargetError):
            parse_target(odd)
    assert time.monotonic() - t0 < 0.5
    assert expansion_size("r[1-10]n[1-10]") == 100
    assert expand_nodeset("gpu[01-03,07],other  root@h:22") == [
        "gpu01",
        "gpu02",
        "gpu03",
        "gpu07",
        "other",
        "root@h:22",
    ]
    assert expand_ranges("n[08-10]") == ["n08", "n09", "n10"]


def test_json_errors_say_where() -> None:
    with pytest.raises(InventoryError, match=r"line 3, column 14: Expecting ':' delimiter"):
        parse_inventory('[\n {"id": 1,\n  "ssh_host" "x"}\n]\n')
    with pytest.raises(InventoryError, match="line 2"):
        parse_inventory('\n{"instances": [}\n')
    assert [e.target for e in parse_inventory("[::1]:22\n")] == ["[::1]:22"]  # a plain list starting with "["


def test_vast_instances_with_unusable_fields_become_skipped_rows() -> None:
    data = [
        {"id": 1, "actual_status": "running", "ssh_host": "ssh4.vast.ai", "ssh_port": "abc"},
        {"id": 2, "actual_status": "running", "ssh_host": "evil\x1b]0;x\x07host", "ssh_port": 2222},
        {"id": 3, "actual_status": "running", "ssh_host": "h\u202egnp", "ssh_port": 2222},
        {"id": 4, "actual_status": "running", "public_ipaddr": "1.2.3.4", "ssh_host": "h", "ssh_port": 5,
         "ports": {"22/tcp": [{"HostPort": "x"}]}},
        {"id": 5, "actual_status": "running", "ssh_host": "h", "ssh_port": 65535, "image_runtype": "jupyter"},
        {"id": {"nested": 1}, "label": "bad\udc80label", "actual_status": "running", "ssh_host": "h\udc80", "ssh_port": 7},
        "not an object",
        {"id": 8, "label": ["x"], "actual_status": "running", "ssh_host": "ok.host", "ssh_port": "2200"},
        {"id": 9, "actual_status": "running", "ssh_host": "ok.host", "ssh_port": True},
    ]  # fmt: skip
    entries = parse_inventory(json.dumps(data))
    assert [e.skip is None for e in entries] == [False, False, False, True, False, False, False, True, False]
    assert "ssh_port 'abc' is not a port" in (entries[0].skip or "")
    assert "ssh_host" in (entries[1].skip or "") and "\\x1b" in (entries[1].skip or "")
    assert entries[3].target == "root@h:5"  # a bad direct port falls back to the proxy address
    assert "past 65535" in (entries[4].skip or "")
    assert entries[7].target == "root@ok.host:2200" and entries[7].labels == {
        "instance_id": "8",
        "vast_status": "running",
    }
    for e in entries:  # nothing that cannot be encoded, nothing that moves a terminal's cursor
        text = e.target + (e.skip or "") + "".join(e.labels.values())
        text.encode("utf-8")
        assert "\x1b" not in text and "\u202e" not in text.replace("\\u202e", "")


def test_duplicates_and_exclusions() -> None:
    from vastprobe.targets import InventoryEntry, exclude, looks_like_path, unique_entries

    entries = [InventoryEntry(t) for t in ("gpu01", "root@gpu03:22", "gpu02", "gpu01", "gpu03")]
    kept, dropped = unique_entries(entries)
    assert [e.target for e in kept] == ["gpu01", "root@gpu03:22", "gpu02", "gpu03"] and dropped == 1
    assert [e.target for e in exclude(kept, ["gpu03"])] == ["gpu01", "gpu02"]  # by host name, too
    assert [e.target for e in exclude(kept, ["root@gpu03:22"])] == ["gpu01", "gpu02", "gpu03"]
    assert looks_like_path("fleet.txt") and looks_like_path("./hosts") and looks_like_path("/etc/x")
    assert not looks_like_path("gpu-box") and not looks_like_path("gpu[01-04]")


def test_a_plain_line_is_one_target_or_node_set() -> None:
    """Whitespace split a line into targets: `host slots=8` (an MPI hostfile), `host 22` or a pasted
    ssh_config line sent vastprobe to resolve `slots=8`, `22` and `HostName` as hosts."""
    for line in ("node01 slots=8", "127.0.0.1 41965", "Host gpu1", "root@127.0.0.2:41965 extra words"):
        with pytest.raises(InventoryError, match=r"^line 2: one target \(or node set\) a line"):
            parse_inventory(f"# fleet\n{line}\n")
    assert [e.target for e in parse_inventory("root@127.0.0.1:41965,root@127.0.0.2:41965\n")] == [
        "root@127.0.0.1:41965",
        "root@127.0.0.2:41965",
    ]  # a node set, as -w reads it
    assert [e.target for e in parse_inventory("  gpu[01-02]  # two\n[::1]:22\n")] == ["gpu01", "gpu02", "[::1]:22"]


def test_a_json_list_without_instances_is_no_host_list() -> None:
    for text in ("[1,2]", '["gpu1", "gpu2"]'):
        with pytest.raises(InventoryError, match="expected a list of instances"):
            parse_inventory(text)


def test_a_byte_order_mark_is_no_part_of_the_first_target() -> None:
    assert [e.target for e in parse_inventory("\ufeffroot@127.0.0.1:22\n")] == ["root@127.0.0.1:22"]
    assert parse_inventory('\ufeff[{"id": 1, "ssh_host": "127.0.0.1", "ssh_port": 22}]')[0].target.endswith(":22")


def test_vast_state_rides_with_the_instance_and_words_a_skip() -> None:
    """What vast.ai says of an instance (actual, intended, status_msg) travels in its labels: a skipped
    one says it, and an unreachable one's error gets it (fanout.py); rows sort by it."""
    from vastprobe.targets import parse_vast, vast_order, vast_words

    data = [
        {"id": 1, "actual_status": "exited", "intended_status": "running", "status_msg": "Error: OOM\x1b[31m",
         "ssh_host": "127.0.0.5", "ssh_port": 2222},
        {"id": 2, "actual_status": "running", "intended_status": "running", "status_msg": "success, running",
         "ssh_host": "127.0.0.6", "ssh_port": 2222},
    ]  # fmt: skip
    gone, live = parse_vast(data)
    assert gone.skip == "vast.ai instance 1 is exited, not running (vast.ai: intended running: 'Error: OOM\\x1b[31m')"
    assert live.skip is None and live.labels["vast_status"] == "running"
    assert vast_words(live.labels) == " (vast.ai: running: 'success, running')"
    assert vast_order(live.labels) < vast_order(gone.labels) < vast_order({})


def test_one_host_written_two_ways_is_probed_once() -> None:
    """`ssh://root@H:P/`, `root@[H]:P` and `root@H:P` are one host: a run probed it twice, counted two
    stalled hosts, and, finding both ends of a connection on two "hosts", joined neither (found by a
    helper). A user name keeps its case, and a missing port or user stays missing (ssh_config may give
    that host another)."""
    from vastprobe.commands.common import unique
    from vastprobe.targets import InventoryEntry, target_key, unique_entries

    same = ["root@127.0.0.1:2222", "ssh://root@127.0.0.1:2222/", "root@[127.0.0.1]:2222", "root@127.0.0.1:2222"]
    assert {target_key(t) for t in same} == {"root@127.0.0.1:2222"}
    assert unique([*same, "local"]) == ["root@127.0.0.1:2222", "local"]
    entries, dropped = unique_entries(InventoryEntry(t) for t in same)
    assert [e.target for e in entries] == ["root@127.0.0.1:2222"] and dropped == 3
    different = ["ROOT@127.0.0.1:2222", "127.0.0.1:2222", "root@127.0.0.1", "root@127.0.0.1:22", "docker:abc"]
    assert len({target_key(t) for t in [same[0], *different]}) == 6
    assert target_key("root@GPU-Box:22") == target_key("root@gpu-box:22")


def test_a_vast_status_message_is_masked_before_and_after_its_cut() -> None:
    """A pull error with a registry password reached the table, the JSON and the history (found by a helper)."""
    msg = "Error response from daemon: pull https://bot:V1pass@registry.example.com/v2/x: unauthorized; --hf-token V2 DB_PASS=V3"
    cut = "x" * 120 + " https://bot:V4passwordthatthecutends" + "y" * 60 + "@registry"
    data = [{"id": 1, "actual_status": "exited", "ssh_host": "h", "ssh_port": 2, "status_msg": m} for m in (msg, cut)]
    shown = [e.labels["vast_msg"] for e in parse_inventory(json.dumps(data))]
    assert not any(s in " ".join(shown) for s in ("V1pass", "V2", "V3", "V4pass")), shown
    assert shown[0].startswith("Error response from daemon: pull https://bot:***@registry.example.com")
