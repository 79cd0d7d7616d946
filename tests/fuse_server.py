"""A FUSE server that answers the kernel's INIT and then never answers anything: the stuck
dataset mount (a hung sshfs, s3fs, gcsfuse) on the real kernel interface, /dev/fuse.

    python tests/fuse_server.py MOUNTPOINT     # prints "ready" once mounted and initialised

Root only (mount(2)). It speaks the FUSE protocol itself (no libfuse), so the test needs nothing
installed; readers of MOUNTPOINT block in request_wait_answer until it is unmounted or killed.
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


def main() -> None:
    mountpoint = sys.argv[1]
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
        _length, opcode, unique, *_ = IN_HEADER.unpack_from(req)
        if opcode == FUSE_INIT:
            _major, _minor, readahead, _flags = INIT_IN.unpack_from(req, IN_HEADER.size)
            body = INIT_OUT.pack(7, 31, readahead, 0, 16, 12, 65536, 1, 0, 0, 0, *([0] * 7))
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), 0, unique) + body)
            print("ready", flush=True)
        # every other request is read and never answered


if __name__ == "__main__":
    main()
