"""vastprobe: find out why a rented GPU host went quiet, in one SSH round-trip."""

__version__ = "0.1.0"
