"""asyncssh, imported once for every module of the ssh transport: without the parts no OpenSSH
server uses (asyncssh_parts.py) and without its liboqs lookup when there is no liboqs (liboqs.py).
Imported only by the modules of transport/ssh/ that use asyncssh (not transport.py nor
settings.py), which are imported only when an ssh target runs or its settings are checked, so `local`, the container transports and the registry never load it.
"""

from __future__ import annotations

import warnings

from cryptography.utils import CryptographyDeprecationWarning

from vastprobe.transport.ssh.asyncssh_parts import import_asyncssh
from vastprobe.transport.ssh.liboqs import skip_absent_liboqs_lookup

with skip_absent_liboqs_lookup(), warnings.catch_warnings():  # no ldconfig/gcc/ld runs per start without liboqs
    # cryptography 51 deprecates DSA, whose key types asyncssh names as it is imported: ten lines
    # on stderr of every ssh run (and a failed CI), about keys vastprobe never offers or accepts
    warnings.simplefilter("ignore", CryptographyDeprecationWarning)
    import_asyncssh()  # without the parts no OpenSSH server uses (asyncssh_parts.py)
    import asyncssh
    from asyncssh.config import SSHClientConfig, SSHConfig

__all__ = ["SSHClientConfig", "SSHConfig", "asyncssh"]
