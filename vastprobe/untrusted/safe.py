"""Remote text is hostile: neutralise terminal escapes, control and bidi characters before a
string reaches the terminal. Rich markup is avoided by building Text objects, never markup."""

from __future__ import annotations

import unicodedata


def safe(text: str, limit: int | None = None) -> str:
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\t":
            out.append(" ")
        elif 0xDC80 <= o <= 0xDCFF:  # an undecodable byte kept by surrogateescape
            out.append(f"\\x{o - 0xDC00:02x}")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    s = "".join(out)
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s
