"""Credentials out of text vastprobe shows or stores: a URL's password (whatever characters it
holds: a raw `/`, `?`, `#` or `@` cut urlsplit's user part short and printed the rest), a libpq
keyword string's `password=`, and the values of well-known secret options in a command line
(`--password=X`, `--token X`, `AWS_SECRET_ACCESS_KEY=X`). What stays is enough to recognise the
command; what goes is replaced by `***`."""

from __future__ import annotations

import re

MASK = "***"

#: `scheme://user:PASSWORD@host`: the password runs to the LAST `@` before the end of the argument
#: (a password may hold `@`, `/`, `?` or `#` unescaped); no `://` inside the user part.
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,30}://[^:/@\s]{0,256}):(?:(?!://)\S){0,2048}@")
#: `password=X` in a libpq keyword string or a URL's query (`?sslpassword=X&…`), `token=`, `secret=`
_KEYWORD = re.compile(
    r"(?i)((?:^|[?&\s;,])[A-Za-z_]{0,32}(?:password|passwd|pwd|token|secret|api[_-]?key|access[_-]?key)=)"
    r"(?:'[^']*'|[^&\s;,]*)"
)
#: the end of an option's name that says its value is a secret: `--password`, `--db-pass`,
#: `--secret-key`, `--passphrase`, `--credentials`; `-p`-like short forms are left
_SECRET_NAME = (
    r"(?:password|passwd|(?<![a-z])pass|passphrase|token|secret|(?:api|access|private|secret)-?key|credentials?)"
)
#: options whose value is a secret: `--password X`, `--password=X`
_SECRET_OPTION = re.compile(rf"(?i)^--?[a-z0-9-]{{0,40}}{_SECRET_NAME}$")
_SECRET_ASSIGN = re.compile(rf"(?i)^(--?[a-z0-9-]{{0,40}}{_SECRET_NAME}=).+$")
#: the same inside one argument (`sh -c '... --password X'`) or a log line: the value after it
_INLINE_OPTION = re.compile(rf"(?i)((?:^|\s)--?[a-z0-9-]{{0,40}}{_SECRET_NAME}(?:=|\s+))(?:'[^']*'|\"[^\"]*\"|\S+)")
#: `NAME=value` arguments (env-style) whose name says secret: `HF_TOKEN=…`, `AWS_SECRET_ACCESS_KEY=…`
_ENV_ASSIGN = re.compile(r"^([A-Z][A-Z0-9_]{0,64}(?:PASSWORD|PASSWD|TOKEN|SECRET|_KEY|APIKEY)=).+$")


def redact_text(text: str) -> str:
    """A line with the passwords of every URL, `password=`-like keyword and `--password X`-like
    option in it masked."""
    if not _may_hold_secret(text):
        return text
    text = _URL_USERINFO.sub(rf"\1:{MASK}@", text)
    text = _KEYWORD.sub(rf"\1{MASK}", text)
    return _INLINE_OPTION.sub(rf"\1{MASK}", text)


#: Every pattern above needs one of these (in any case) in the text it masks: one look over a whole
#: command line or log line passes most of them untouched (each argument through the patterns cost
#: ~8 us a process; an ignore-case regex over the line ~4 us; this ~1 us)
_ANY_SECRET = ("pass", "pwd", "token", "secret", "key", "credential", "://")


def _may_hold_secret(text: str) -> bool:
    """Whether `text` holds a word some pattern above needs, folded as the patterns' ignore-case
    match folds (U+017F is s)."""
    folded = text.casefold()
    return any(word in folded for word in _ANY_SECRET)


def redact_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A command line with its secrets masked: URL passwords, keyword passwords, the value of a
    secret option (`--password X`, `--token=X`) and of a secret `NAME=value` argument."""
    if not _may_hold_secret("\0".join(argv)):
        return argv
    out: list[str] = []
    hide_next = False
    changed = False
    for arg in argv:
        new = arg
        if hide_next:
            new, hide_next = MASK, False
        elif _SECRET_OPTION.match(arg):
            hide_next = True
        elif m := (_SECRET_ASSIGN.match(arg) or _ENV_ASSIGN.match(arg)):
            new = m.group(1) + MASK
        else:
            new = redact_text(arg)
        changed = changed or new != arg
        out.append(new)
    return tuple(out) if changed else argv
