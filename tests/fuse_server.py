"""A FUSE server that answers the kernel's INIT and then never answers anything: the stuck
dataset mount (a hung sshfs, s3fs, gcsfuse) on the real kernel interface, /dev/fuse.

    python tests/fuse_server.py MOUNTPOINT     # prints "ready" once mounted and initialised
    python tests/fuse_server.py MOUNTPOINT --serve-until FLAG

Root only (mount(2)). It speaks the FUSE protocol itself (no libfuse), so the test needs nothing
installed; readers of MOUNTPOINT block in request_wait_answer until it is unmounted or killed.

With --serve-until it first serves a root holding one file, `job.log`, that can be opened and
appended to (a job's log on a network mount), and stops answering once FLAG exists: a job holds its
log open on a mount that then died. Nothing is cached, so every later stat reaches the server.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

FUSE_INIT = 26
IN_HEADER = struct.Struct("<IIQQIIII")  # len, opcode, unique, nodeid, uid, gid, pid, padding
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
INIT_IN = struct.Struct("<IIII")  # major, minor, max_readahead, flags
# major, minor, max_readahead, flags, max_background, congestion_threshold, max_write, time_gran,
# max_pages, map_alignment, flags2, unused[7]
INIT_OUT = struct.Struct("<IIIIHHIIHHI7I")
# ino, size, blocks, atime, mtime, ctime, their nanoseconds, mode, nlink, uid, gid, rdev, blksize, padding
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
ENTRY_OUT = struct.Struct("<QQQQII")  # nodeid, generation, entry and attr valid (s, ns)
ATTR_OUT = struct.Struct("<QII")  # attr valid (s, ns), padding
LOOKUP, GETATTR, SETATTR, OPEN, WRITE, RELEASE, FLUSH, OPENDIR, RELEASEDIR = 1, 3, 4, 14, 16, 18, 25, 27, 29
FORGETS = (2, 42)  # FORGET, BATCH_FORGET: never answered
ENOENT, ENOSYS = 2, 38


def attr(node: int, size: int) -> bytes:
    if node == 1:
        return ATTR.pack(1, 0, 0, 0, 0, 0, 0, 0, 0, 0o40755, 2, 0, 0, 0, 4096, 0)
    return ATTR.pack(2, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0, 0o100644, 1, 0, 0, 0, 4096, 0)


def serve(fd: int, unique: int, opcode: int, node: int, body: bytes, log: bytearray) -> None:
    """One request of the serving phase answered: the root and its `job.log`."""

    def reply(payload: bytes = b"", error: int = 0) -> None:
        os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) + payload)

    if opcode == LOOKUP:
        if node == 1 and body.split(b"\0", 1)[0] == b"job.log":
            reply(ENTRY_OUT.pack(2, 0, 0, 0, 0, 0) + attr(2, len(log)))
        else:
            reply(error=ENOENT)
    elif opcode in (GETATTR, SETATTR):
        reply(ATTR_OUT.pack(0, 0, 0) + attr(node, len(log)))
    elif opcode in (OPEN, OPENDIR):
        reply(struct.pack("<QII", 0, 1 if opcode == OPEN else 0, 0))  # FOPEN_DIRECT_IO: no page cache
    elif opcode == WRITE:
        _fh, offset, size = struct.unpack_from("<QQI", body)
        log[offset : offset + size] = body[40 : 40 + size]
        reply(struct.pack("<II", size, 0))
    elif opcode in (RELEASE, FLUSH, RELEASEDIR):
        reply()
    else:
        reply(error=ENOSYS)


def main() -> None:
    mountpoint = sys.argv[1]
    until = sys.argv[3] if sys.argv[2:3] == ["--serve-until"] else None
    log = bytearray()
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"vastprobe-test", mountpoint.encode(), b"fuse.vastprobe-test", 0, opts) != 0:
        sys.exit(f"mount: {os.strerror(ctypes.get_errno())}")
    while True:
        try:
            req = os.read(fd, 1 << 20)
        except OSError:
            return  # unmounted or aborted
        _length, opcode, unique, node, *_ = IN_HEADER.unpack_from(req)
        if opcode != FUSE_INIT and opcode not in FORGETS and until is not None and not os.path.exists(until):
            serve(fd, unique, opcode, node, req[IN_HEADER.size :], log)
            continue
        if opcode == FUSE_INIT:
            _major, _minor, readahead, _flags = INIT_IN.unpack_from(req, IN_HEADER.size)
            body = INIT_OUT.pack(7, 31, readahead, 0, 16, 12, 65536, 1, 0, 0, 0, *([0] * 7))
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), 0, unique) + body)
            print("ready", flush=True)
        # every other request (once FLAG exists, with --serve-until) is read and never answered


if __name__ == "__main__":
    main()
