"""The ssh transport, in parts: transport.py (the Transport the registry opens, without asyncssh),
settings.py (the command line's SSH settings), run.py (connect and run the probe), config.py,
keys.py, hostkeys.py, failures.py, and asyncssh_lib.py (asyncssh imported once, lighter:
asyncssh_parts.py, liboqs.py). Empty on purpose: importing the package loads none of them."""
