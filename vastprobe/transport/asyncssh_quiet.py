"""asyncssh logs as it goes (21 calls a connection: versions, key exchange, auth, the channel) and
names every control packet it sends or receives, and it formats each call's arguments, and each
packet's name, size and payload, before Python's logging says whether anything is written. Nothing
is, unless `-v` (commands/options._verbose_logging) turned asyncssh's log on: a sweep paid ~50 us of
CPU a host for text nobody saw. Here the level is asked first; what `-v`, `-vv` and `-vvv` print is
unchanged (asyncssh's own checks still run on everything let through).
"""

from __future__ import annotations

import logging
from typing import Any

_patched = False


def log_only_when_enabled() -> None:
    """Wrap asyncssh's SSHLogger.log and its packet logger: the original runs only when the
    logger would write the message. Once per process."""
    global _patched
    if _patched:
        return
    from asyncssh.logging import SSHLogger
    from asyncssh.packet import SSHPacketLogger

    log = SSHLogger.log
    log_packet = SSHPacketLogger._log_packet

    def log_if_enabled(self: SSHLogger, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(level):
            log(self, level, msg, *args, **kwargs)

    def log_packet_if_enabled(self: SSHPacketLogger, *args: Any) -> None:
        logger = self.logger
        if logger._debug_level >= 3 and logger.isEnabledFor(logging.DEBUG):  # as SSHLogger.packet asks
            log_packet(self, *args)

    SSHLogger.log = log_if_enabled  # type: ignore[method-assign]
    SSHPacketLogger._log_packet = log_packet_if_enabled  # type: ignore[method-assign,assignment]
    _patched = True
