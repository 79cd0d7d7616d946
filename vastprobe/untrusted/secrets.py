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
#: a `KEY` name that says secret: `SECRET_KEY`, `private_key`, Azure's `AccountKey`
_KEY_NAMES = r"(?:api|access|secret|private|encryption|account|signing|master)[_-]?key"
#: what may stand before such a name: a separator, or one `=`, `.` or quote deeper (`--env=HF_TOKEN=X`,
#: `--set auth.password=X`, `dsn="password=X"`: each showed its secret; found by a helper)
_KEYWORD = re.compile(
    rf"(?i)((?:^|[?&\s;,(=.'\"\[{{|/<])(?:[A-Za-z_-]{{0,32}}(?:password|passwd|pwd|token|secret|{_KEY_NAMES})="
    # with spaces around `=` (ini, TOML) only the strong names: `token = tokenizer(…)` is code (found by a helper)
    rf"|[A-Za-z_]{{0,32}}(?:password|passwd|secret|{_KEY_NAMES})\s*=\s*))"
    r"(?:'[^']*'|\"[^\"]*\"|[^&\s]+)"
)
#: `DB_PASS=X` in a text, upper case as an environment's names are (`fwd_pass=3` is no secret)
_ENV_TEXT = re.compile(r"((?:^|\s)[A-Z][A-Z0-9_]{0,64}_PASS=)\S+")
#: a signed URL's signature or key in its query (`?sig=`, `&X-Amz-Signature=`, `?key=`)
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:sig|signature|key|auth|x-amz-signature|x-amz-credential|x-goog-signature)=)[^&\s]+"
)
#: a token given as a URL's user (`https://ghp_…@github.com`, `https://TOKEN@host/x.git`): 20 or more
#: token characters, never a user's name; and `os.environ['HF_TOKEN'] = 'X'`, `env["API_KEY"]=X`
_URL_TOKEN_USER = re.compile(r"(://)[A-Za-z0-9_.~+-]{20,256}@")
_INDEX_ASSIGN = re.compile(
    r"(?i)(\[['\"][A-Za-z0-9_]{0,64}(?:password|passwd|token|secret|_key|apikey)['\"]\]\s*=\s*)"
    r"(?:'[^']*'|\"[^\"]*\"|\S+)"
)
#: a Slack webhook's path is its secret
_WEBHOOK = re.compile(r"(hooks\.slack\.com/services/)\S+")
#: `.netrc`: `machine HOST login USER password X`
_NETRC = re.compile(r"(?i)(\b(?:machine|login)\s+\S+\s.{0,256}?\bpassword\s+)\S+")
#: an XML element that names a secret: `<password>X</password>`
_XML_SECRET = re.compile(r"(?i)(<[a-z_:.-]{0,32}(?:password|passwd|secret|token|api_?key)[^>]{0,64}>)[^<]*(</)")
#: a cookie header's whole value (`Cookie: sessionid=X; csrftoken=Y`)
_COOKIE = re.compile(r"(?i)(\b(?:set-)?cookie:\s*)[^'\"\n]+")  # to the end of its header, not of a script
#: the end of an option's name that says its value is a secret: `--password`, `--db-pass`,
#: `--db_password` (argparse's spelling), `--secret-key`, `--passphrase`, `--credentials`, `--pw`;
#: `-p`-like short forms are left
_SECRET_NAME = (
    r"(?:password|passwd|(?<![a-z])pass|passphrase|(?<![a-z])pwd?|token|secret(?:[-_][a-z]{1,16})?"
    r"|requirepass|masterauth"  # redis-server's
    r"|(?:api|access|private|secret|wandb|hf|openai|license|signing|encryption|master|client)[-_.]?key"
    r"|credentials?)"
)
#: an option's name before that end: letters, digits, `-`, `_` and `.` (`-Dspring.datasource.password=`)
_OPTION_HEAD = r"--?[a-z0-9_.-]{0,40}"
#: options whose value is a secret: `--password X`, `--password=X`
_SECRET_OPTION = re.compile(rf"(?i)^{_OPTION_HEAD}{_SECRET_NAME}$")
_SECRET_ASSIGN = re.compile(rf"(?i)^({_OPTION_HEAD}{_SECRET_NAME}=).+$")
#: the same inside one argument (`sh -c '... --password X'`) or a log line: the value after it
_INLINE_OPTION = re.compile(rf"(?i)((?:^|\s){_OPTION_HEAD}{_SECRET_NAME}(?:=|\s+))(?:'[^']*'|\"[^\"]*\"|\S+)")
#: a JSON or YAML key that names a secret, and its value: `"password": "X"`, `api_key: X`
_MAPPING_KEY = re.compile(
    rf"(?i)((?:^|[\s{{,])[\"']?[a-z0-9_.-]{{0,32}}{_SECRET_NAME}[\"']?\s*:\s*)(?:\"[^\"]*\"|'[^']*'|[^\s,}}]+)"
)
#: tokens by their issuers' own shapes, wherever they stand (`export HF_TOKEN hf_…`, a bearer
#: header, an NCCL_* value): Hugging Face, GitHub, GitLab, OpenAI-like `sk-`, Slack, AWS key ids
_TOKEN_SHAPE = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|sk-(?:proj-)?[A-Za-z0-9_-]{32,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
    r"(?![A-Za-z0-9])"
)
#: `Authorization: Bearer X` (or any scheme), a bare `Bearer X` that looks like a token, curl's
#: `-u user:password` within one text (`sh -c 'curl -u …'`, a log line)
_AUTH = re.compile(
    r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?[a-z-]{1,32}\s+|\bbearer\s+(?=[A-Za-z0-9._~+/=-]{16,})"
    r"|\bcurl\b[^|;&\n]{0,512}?\s(?:-u|--user)[\s=]+[^:\s]{1,64}:)\S+"
)
#: `--auth X` (a server's password or token); `--no-auth`, `--enable-auth` are flags (found by a helper)
_AUTH_OPTION = re.compile(r"(?i)^--?auth(?:[-_]token)?$")
#: curl's options whose value is `user:password`
_CURL_USER = ("-u", "--user", "--proxy-user", "-U")
#: programs whose short option takes a password: MySQL's and MariaDB's clients `-pSECRET` (attached
#: only: `-p` alone prompts), sshpass `-p SECRET`, redis-cli `-a SECRET`. Elsewhere `-p` is a port
_SHORT_SECRET = {
    **dict.fromkeys(
        ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow", "mysqlbinlog", "mysqlslap"),
        ("-p", False),
    ),
    **dict.fromkeys(("mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-check"), ("-p", False)),
    "sshpass": ("-p", True),
    "redis-cli": ("-a", True),
    "sqlcmd": ("-P", True),
    **dict.fromkeys(("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd"), ("-w", True)),
}
#: the same within one text (`sh -c 'mysqldump -pX db | gzip'`, a log line)
_SHORT_INLINE = re.compile(
    r"((?<![\w-])"
    r"(?:(?:mysql[a-z]*|mariadb(?:-[a-z]+)?)\b[^|;&\n]{0,512}?\s-p"  # attached only: `-p` alone prompts
    r"|(?:sshpass\b[^|;&\n]{0,512}?\s-p|redis-cli\b[^|;&\n]{0,512}?\s-a)\s?))"
    r"(?![-\s])\S+"
)
#: a URL cut short by a bound before its `@` (an argument cut at the probe's 1100 characters):
#: `postgres://app:CutSecretPassw`. What follows `user:` to the cut is taken for the password,
#: unless it is a port (digits, then the path or the end)
_CUT_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,30}://[^:/@\s\[\]]{0,256}):(?![0-9]{0,5}(?:[/?#]|$))[^@\s]*$")
#: `NAME=value` arguments (env-style) whose name says secret: `HF_TOKEN=…`, `AWS_SECRET_ACCESS_KEY=…`
_ENV_ASSIGN = re.compile(
    r"^((?:[A-Z][A-Z0-9_]{0,64})?(?:PASSWORD|PASSWD|(?<![A-Z])PASS|_PASS|TOKEN|SECRET|_KEY|APIKEY)=).+$"
)
#: the same at the head of a script (`sh -c 'PGPASSWORD=X pg_dump …'`): the value to its first blank
#: or separator, the script after it kept (it was masked whole, the stuck command unseen; found by a helper)
_ENV_ASSIGN_HEAD = re.compile(
    r"^((?:[A-Z][A-Z0-9_]{0,64})?(?:PASSWORD|PASSWD|(?<![A-Z])PASS|_PASS|TOKEN|SECRET|_KEY|APIKEY)=)"
    r"(?:'[^']*'|\"[^\"]*\"|[^\s;&|]+)(?=[\s;&|])"
)
#: a program's login whose `-p` is the password (`docker login -p X`; elsewhere docker's `-p` publishes a port)
_LOGIN_P = frozenset({"docker", "podman", "nerdctl", "buildah", "skopeo", "helm"})
#: Interpreters whose first argument is the script that runs: the script's name says what runs
_SCRIPT_RUNNERS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh", "busybox", "python", "python3", "perl"})
#: the same within one text (`sh -c 'docker login -u me -p X reg && docker push …'`), and aws's setting
_LOGIN_INLINE = re.compile(
    r"((?<![\w-])(?:docker|podman|nerdctl|buildah|skopeo|helm)(?:\s+[a-z-]{1,16}){0,2}\s+login\b[^|;&\n]{0,512}?"
    r"\s-p\s+|\baws\s+configure\s+set\s+\S{0,64}(?:secret|password|token|key)\S{0,64}\s+)"
    r"(?:'[^']*'|\"[^\"]*\"|[^\s;&|]+)"
)
#: openssl's options whose value is a password or a key (`enc -k X`, `-K HEX`, `-passin pass:X`)
_OPENSSL_SECRET = frozenset({"-k", "-K", "-pass", "-passin", "-passout"})
#: smbclient's and rpcclient's `-U user%password`: the password after the `%`
_SMB_USER = re.compile(r"^((?:-U|--user=)?[^%\s]{0,256}%).+$")


def redact_text(text: str) -> str:
    """A line with the passwords of every URL, `password=`-like keyword and `--password X`-like
    option in it masked."""
    if not _may_hold_secret(text):
        return text
    text = _URL_USERINFO.sub(rf"\1:{MASK}@", text)
    text = _KEYWORD.sub(rf"\1{MASK}", text)
    text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
    text = _URL_TOKEN_USER.sub(rf"\1{MASK}@", text)
    text = _INDEX_ASSIGN.sub(rf"\1{MASK}", text)
    text = _WEBHOOK.sub(rf"\1{MASK}", text)
    text = _ENV_TEXT.sub(rf"\1{MASK}", text)
    text = _NETRC.sub(rf"\1{MASK}", text)
    text = _XML_SECRET.sub(rf"\1{MASK}\2", text)
    text = _COOKIE.sub(rf"\1{MASK}", text)
    text = _MAPPING_KEY.sub(rf"\1{MASK}", text)
    text = _AUTH.sub(rf"\1{MASK}", text)
    text = _TOKEN_SHAPE.sub(MASK, text)
    text = _SHORT_INLINE.sub(rf"\1{MASK}", text)
    text = _LOGIN_INLINE.sub(rf"\1{MASK}", text)
    return _INLINE_OPTION.sub(rf"\1{MASK}", text)


#: The lines of a PEM private key: everything from its BEGIN line to its END line is masked
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,32}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,32}PRIVATE KEY-----")


#: A line of a PEM body: base64, or one of its headers (`Proc-Type:`, `DEK-Info:`)
_PEM_BODY = re.compile(r"^\s*(?:[A-Za-z0-9+/=]{8,}|Proc-Type:.*|DEK-Info:.*)\s*$")


def redact_lines(lines: list[str]) -> list[str]:
    """Lines of a log, each masked as redact_text masks it, and a PEM private key's body masked whole
    (its lines hold no word that says secret: a log tail printed it; found by a helper). A tail's
    window can open inside a key: an END line with no BEGIN before it masks the body lines above it
    (46 lines of a 4096-bit key showed so; found by a helper)."""
    out: list[str] = []
    in_key = False
    for line in lines:
        if in_key:
            end = _PEM_END.search(line)
            in_key = end is None
            out.append(MASK if end is None else MASK + " " + line[end.start() :])
            continue
        if (end := _PEM_END.search(line)) is not None:
            k = len(out)
            while k > 0 and _PEM_BODY.match(lines[k - 1]):
                k -= 1
            out[k:] = [MASK] * (len(out) - k)
            body = line[: end.start()]
            out.append((MASK + " " if body.strip() else "") + line[end.start() :])
            continue
        if (m := _PEM_BEGIN.search(line)) is not None:
            in_key = _PEM_END.search(line, m.end()) is None
            out.append(line[: m.end()] + ("" if in_key else f" {MASK} -----END PRIVATE KEY-----"))
            continue
        out.append(redact_text(line))
    return out


def redact_cut(text: str) -> str:
    """Text a bound cut short (its end is not its own): masked as any, and a URL whose `@` the cut
    took masked from its user's `:` to the end."""
    return _CUT_USERINFO.sub(rf"\1:{MASK}", redact_text(text))


#: Every pattern above needs one of these (in any case) in the text it masks: one look over a whole
#: command line or log line passes most of them untouched (each argument through the patterns cost
#: ~8 us a process; an ignore-case regex over the line ~4 us; this ~1 us)
_ANY_SECRET = (
    "pass",
    "pw",
    "token",
    "secret",
    "key",
    "credential",
    "://",
    "hf_",
    # GitHub's shapes by their prefixes ("gh" alone is in "high", "right", "through": every log line)
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat",
    "sk-",
    "xox",
    "akia",
    "bearer",
    "authorization",
    "curl",
    "eyj",
    "sig=",
    "signature=",
    "cookie",
    "auth",
    "mysql",
    "mariadb",
    "sshpass",
    "redis-cli",
    "login",  # docker login -p
    "sqlcmd",
    "ldap",
    "hooks.slack",
    "openssl",
    "htpasswd",
    "smb",  # smbclient -U user%password
    "rpcclient",
)


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
    prog = argv[0].rsplit("/", 1)[-1] if argv else ""
    if prog in _SCRIPT_RUNNERS and len(argv) > 1 and not argv[1].startswith("-"):
        # a wrapper script runs as `sh /usr/local/bin/mysql -pX`: the script's name is the program (its
        # password showed; found by a new user's review)
        prog = argv[1].rsplit("/", 1)[-1]
    curl = prog == "curl"
    short, apart = _SHORT_SECRET.get(prog, ("", False))
    if prog in _LOGIN_P and "login" in argv[1:3]:
        short, apart = "-p", True
    # `aws configure set aws_secret_access_key X`: the value after a secret-named setting
    aws_set = prog == "aws" and argv[1:3] == ("configure", "set")
    openssl = prog == "openssl"
    smb = prog in ("smbclient", "rpcclient", "smbcacls", "smbget")
    # `htpasswd -b FILE USER PASSWORD` (-b among its flags: -bc, -Bb): the password is the last argument
    htpasswd = prog == "htpasswd" and any(
        a.startswith("-") and "b" in a[1:] and not a.startswith("--") for a in argv[1:]
    )
    if argv:  # the program: its own name, never an option's value
        out.append(redact_text(argv[0]))
        changed = out[0] != argv[0]
    for arg in argv[1:]:
        new = arg
        if hide_next:
            new, hide_next = MASK, False
        elif short and arg == short:
            hide_next = apart
        elif short and arg.startswith(short) and not arg.startswith("--"):
            new = short + MASK
        elif htpasswd and arg is argv[-1] and len(argv) > 3 and not arg.startswith("-"):
            new = MASK
        elif smb and (m := _SMB_USER.match(arg)) and (arg.startswith(("-U", "--user=")) or out[-1] in ("-U", "--user")):
            new = m.group(1) + MASK
        elif (
            (curl and arg in _CURL_USER)
            or (openssl and arg in _OPENSSL_SECRET)
            or _SECRET_OPTION.match(arg)
            or _AUTH_OPTION.match(arg)
            or (aws_set and _KEYWORD.match(arg + "=x"))
        ):
            hide_next = True
        elif m := _ENV_ASSIGN_HEAD.match(arg):
            new = redact_text(m.group(1) + MASK + arg[m.end() :])
        elif m := (_SECRET_ASSIGN.match(arg) or _ENV_ASSIGN.match(arg)):
            new = m.group(1) + MASK
        else:
            new = redact_text(arg)
        changed = changed or new != arg
        out.append(new)
    return tuple(out) if changed else argv
