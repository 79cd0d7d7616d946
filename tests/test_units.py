"""Byte counts as a reader takes them in."""

from vastprobe.units import byte_size


def test_byte_size() -> None:
    assert [byte_size(n) for n in (0, 1023, 1024, 2067112, 5 << 30, 1 << 50, 1 << 60)] == [
        "0 B", "1023 B", "1.0 KiB", "2.0 MiB", "5.0 GiB", "1024.0 TiB", "1048576.0 TiB"
    ]  # fmt: skip
