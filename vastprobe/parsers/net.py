"""Socket tables, filtered by the probe to the sockets some listed fd holds: the probe's own network
namespace's (`@ns self`), then those read through a process holding a socket found in none of
them (`@ns PID`: another namespace, a container's); and ss's Unix-socket peers.

    @ns self
    tcp:   3: 0100007F:8B34 0100007F:DFE5 01 00000000:00000000 00:00000000 00000000  0  0 48036 1 ...
    unix:000000009e42ab5b: 00000003 00000000 00000000 0001 03 48035
    @ss u_str ESTAB 0      0                  * 48035            * 48034
TCP addresses are hex in network order per 32-bit word, stored little-endian; the queues are
`tx_queue:rx_queue` in hex (for a LISTEN socket rx_queue is the accept backlog).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from vastprobe.model import Socket, SocketProto, SocketTable, Unavailable
from vastprobe.probe import sources as src
from vastprobe.untrusted.numbers import read_hex, read_int

if TYPE_CHECKING:
    from vastprobe.parsers.reading import Sections

TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}
UNIX_STATES = {"01": "UNCONNECTED", "02": "CONNECTING", "03": "CONNECTED", "04": "DISCONNECTING"}
_UNIX_LISTENING = 0x10000  # __SO_ACCEPTCON in Flags

_NS = re.compile(r"^@ns (self|[0-9]{1,10})$", re.ASCII)
_ROW = re.compile(r"^(tcp6?|udp6?|unix):(.*)$", re.ASCII)
_INET = re.compile(
    r"^\s*[0-9]+: ([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4}) ([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4}) ([0-9A-F]{2}) "
    r"([0-9A-F]{8}):([0-9A-F]{8}) \S+ \S+ +[0-9]+ +[0-9]+ +([0-9]{1,20})",
    re.ASCII,
)
_UNIX = re.compile(
    r"^[0-9a-f]+: [0-9A-F]{8} [0-9A-F]{8} ([0-9A-F]{8}) ([0-9A-F]{4}) ([0-9A-F]{2}) +([0-9]{1,20})(?: (.*))?$", re.ASCII
)


def inet_address(hex_addr: str, hex_port: str) -> str:
    raw = bytes.fromhex(hex_addr)
    # each 32-bit word is in host (little-endian) order
    b = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    port = read_hex(hex_port, 4) or 0
    if len(b) == 4:
        return f"{ipaddress.IPv4Address(b)}:{port}"
    ip6 = ipaddress.IPv6Address(b)
    return f"{ip6.ipv4_mapped}:{port}" if ip6.ipv4_mapped else f"[{ip6}]:{port}"


def parse_net_section(text: str, truncated: bool = False) -> SocketTable:
    netns: int | None = None
    sockets: dict[int, Socket] = {}
    peers: dict[int, int] = {}
    queues: dict[int, tuple[int, int]] = {}  # a Unix socket's (send, receive) queues, from ss
    saw_ss = False
    for raw in text.split("\n"):
        line = raw[:4096]
        if line.startswith("@ns "):
            m = _NS.match(line)
            netns = None if m is None else 0 if m.group(1) == "self" else read_int(m.group(1))
            continue
        if line.startswith("@ss "):
            saw_ss = True
            pair = _ss_pair(line)
            if pair is not None:
                local, peer, recv_q, send_q = pair
                peers[local] = peer
                queues[local] = (send_q, recv_q)
            continue
        row = _ROW.match(line)
        if row is None:
            continue
        proto: SocketProto = row.group(1)  # type: ignore[assignment]
        sock = _unix(row.group(2), netns) if proto == "unix" else _inet(row.group(2), proto, netns)
        if sock is not None:
            sockets.setdefault(sock.inode, sock)
    if peers:
        sockets = {
            i: _with_peer(s, peers.get(i), queues.get(i)) if s.proto == "unix" else s for i, s in sockets.items()
        }
    return SocketTable(tuple(sockets.values()), unix_peers_known=saw_ss or bool(peers), truncated=truncated)


def _with_peer(s: Socket, peer: int | None, queues: tuple[int, int] | None) -> Socket:
    send_q, recv_q = queues if queues is not None else (None, None)
    return Socket(s.inode, s.proto, s.netns, s.local, s.remote, s.state, send_q, recv_q, peer)


def _ss_pair(line: str) -> tuple[int, int, int, int] | None:
    """(local inode, peer inode, Recv-Q, Send-Q) of an `@ss u_str ESTAB 0 0 <addr> <inode> <peer
    addr> <peer inode>` line: the last field, and the first number after the queues (an address may
    hold spaces). Recv-Q is the bytes waiting to be read on this end (/proc/net/unix has no
    queues: a request a server never read shows only here). Read by fields, not by a regex: two
    lazy `.*?` groups on one line cost quadratic time."""
    f = line.split()
    if len(f) < 7 or not f[1].startswith("u_"):
        return None
    recv_q, send_q = read_int(f[3]), read_int(f[4])
    if recv_q is None or send_q is None:
        return None
    peer = read_int(f[-1])
    local = next((n for n in (read_int(x) for x in f[5:-1]) if n is not None), None)
    return (local, peer, recv_q, send_q) if local is not None and peer is not None else None


def _inet(body: str, proto: SocketProto, netns: int | None) -> Socket | None:
    m = _INET.match(body)
    if m is None:
        return None
    state = (
        TCP_STATES.get(m.group(5), m.group(5))
        if proto.startswith("tcp")
        else ("UNCONN" if m.group(5) == "07" else "CONNECTED")
    )
    remote = inet_address(m.group(3), m.group(4))
    return Socket(
        inode=read_int(m.group(8)) or 0,
        proto=proto,
        netns=netns,
        local=inet_address(m.group(1), m.group(2)),
        remote="" if remote.endswith(":0") and state in ("LISTEN", "UNCONN") else remote,
        state=state,
        send_queue=read_hex(m.group(6), 8),
        recv_queue=read_hex(m.group(7), 8),
    )


def _unix(body: str, netns: int | None) -> Socket | None:
    m = _UNIX.match(body)
    if m is None:
        return None
    flags = read_hex(m.group(1), 8) or 0
    state = "LISTEN" if flags & _UNIX_LISTENING else UNIX_STATES.get(m.group(3), m.group(3))
    inode = read_int(m.group(4))
    if inode is None:
        return None
    return Socket(inode, "unix", netns, (m.group(5) or "").strip(), "", state, None, None)


def build_sockets(sections: Sections, fmt: int) -> SocketTable | Unavailable:
    sec = sections.get(src.NET)
    if sec is None:
        return Unavailable(sections.absent(src.NET, fmt))
    table: SocketTable = sections.read(src.NET, sec.text, truncated=sec.truncated)
    return table
