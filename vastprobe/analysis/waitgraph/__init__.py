"""The wait-for graph: what each blocked process waits on, and who holds the other end.

Linux's answer to Windows' Wait Chain Traversal, built once per snapshot from the wait channel,
the system call and its fd argument, the fd tables, /proc/locks, the socket tables and FUSE
mounts. An edge says "P waits on <resource>, which these processes can end": a child's exit,
the write end of a pipe or FIFO, the peer of a socket, the holder of a file lock, a FUSE server.
Chains follow edges from a waiter to the process at the end (the root blocker); a chain that
comes back to itself is a deadlock. Rules read chains; none re-derives them.

The package: `edges` (what an edge, a chain and a waiting thread are), `index` (the snapshot
indexed once, and what each process and thread waits for), one module per kind of resource that
derives its edges (`pipes`, `polls`: event loops over several, `sockets`, `locks`, `fuse`), and
`graph` (`WaitGraph`: every process's edges, and the chains and loops they make).
"""
