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
#: a `KEY` name that says secret: `SECRET_KEY`, `private_key`, Azure's `AccountKey`, tailscale's
#: `TS_AUTHKEY` (shown whole; found by a security review)
_KEY_NAMES = r"(?:api|access|secret|private|encryption|account|signing|master|auth)[_-]?key"
#: what may stand before such a name: a separator, or one `=`, `.` or quote deeper (`--env=HF_TOKEN=X`,
#: `--set auth.password=X`, `dsn="password=X"`: each showed its secret; found by a helper). The shell's
#: `PWD=/root` and `OLDPWD=/tmp` are a working directory, kept (they were masked; found by a security
#: review); an ODBC string's `;PWD=X` is a password
_KEYWORD = re.compile(
    rf"(?i)((?:^|[?&\s;,(=.'\"\[{{|/<])(?!(?:old)?pwd=/)"
    rf"(?:[A-Za-z_-]{{0,32}}(?:password|passwd|pwd|token|secret|{_KEY_NAMES})="
    # with spaces around `=` (ini, TOML) only the strong names: `token = tokenizer(…)` is code (found by a helper)
    rf"|[A-Za-z_]{{0,32}}(?:password|passwd|secret|{_KEY_NAMES})\s*=\s*))"
    r"(?:'[^']*'|\"[^\"]*\"|[^&\s]+)"
)
#: `DB_PASS=X` in a text, upper case as an environment's names are (`fwd_pass=3` is no secret), and
#: `DB_PW=X`, `NCCL_PWD=X` (shown whole; found by a security review: `PWD=` alone is the shell's)
_ENV_TEXT = re.compile(r"((?:^|\s)[A-Z][A-Z0-9_]{0,64}_(?:PASS|PWD|PW)=)\S+")
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
#: `--db_password` (argparse's spelling), `--secret-key`, `--passphrase`, `--credentials`, `--pw`,
#: tailscale's `--authkey=X` and `--auth-key X` (shown whole; found by a security review: `--auth`
#: alone and `--no-auth` are `_AUTH_OPTION`'s); `-p`-like short forms are left
_SECRET_NAME = (
    r"(?:password|passwd|(?<![a-z])pass|passphrase|(?<![a-z])pwd?|token|secret(?:[-_][a-z]{1,16})?"
    r"|requirepass|masterauth"  # redis-server's
    r"|(?:api|access|private|secret|wandb|hf|openai|license|signing|encryption|master|client|auth)[-_.]?key"
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
#: a key named `auth` or ending in `_auth`: a registry's `"auth": "BASE64(user:password)"` (a Docker
#: config, `DOCKER_AUTH_CONFIG`), `basic_auth: X`; and npm's `.npmrc` `_auth=X`, `//reg/:_authToken=X`.
#: Each was shown whole (found by a security review). The value is a quoted one, or unquoted of 16 or
#: more token characters: `auth: connection refused` in a log, `"requires_auth": true` stay; `author`,
#: `oauth_url`, `auths` are other keys
_AUTH_KEY = re.compile(
    r"(?i)((?:^|[\s{,])([\"']?)(?:[a-z0-9.-]{0,32}_)?auth\2\s*:\s*(?=[\"']|[A-Za-z0-9+/_.~-]{16})"
    r"|(?:^|[\s:])_auth(?:token)?\s*=\s*)"
    r"(?:\"[^\"]*\"|'[^']*'|[^\s,}]+)"
)
#: tokens by their issuers' own shapes, wherever they stand (`export HF_TOKEN hf_…`, a bearer
#: header, an NCCL_* value): Hugging Face, GitHub, GitLab, OpenAI-like `sk-` (Anthropic's `sk-ant-`
#: too), Slack, AWS key ids. Then, each shown whole (found by a security review), at its issuer's
#: documented length: Tailscale's `tskey-TYPE-ID-SECRET`, Stripe's secret and restricted keys, Google
#: API keys, PyPI's and TestPyPI's macaroons, npm, AWS temporary key ids (`ASIA`), DigitalOcean,
#: Databricks. `sk-learn`, `pypi-simple`, `npm_config_…`, a hash or a UUID match none
_TOKEN_SHAPE = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|sk-(?:proj-)?[A-Za-z0-9_-]{32,}|xox[abposr]-[A-Za-z0-9-]{10,}|A[KS]IA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|tskey-(?:(?:auth|api|client|scim|webhook)-)?[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}"
    r"|[sr]k_(?:live|test|prod)_[A-Za-z0-9]{24,}|AIza[0-9A-Za-z_-]{35}"
    r"|pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZ)[A-Za-z0-9_-]{50,}|npm_[A-Za-z0-9]{36}"
    r"|do[opr]_v1_[a-f0-9]{64}|dapi[a-f0-9]{32}(?:-[0-9])?)"
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
#: only: `-p` alone prompts), sshpass `-p SECRET`, redis-cli `-a SECRET`, twine `-p SECRET` (shown
#: whole; found by a security review). Elsewhere `-p` is a port
_SHORT_SECRET = {
    **dict.fromkeys(
        ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow", "mysqlbinlog", "mysqlslap"),
        ("-p", False),
    ),
    **dict.fromkeys(("mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-check"), ("-p", False)),
    "sshpass": ("-p", True),
    "twine": ("-p", True),
    "redis-cli": ("-a", True),
    "sqlcmd": ("-P", True),
    **dict.fromkeys(("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd"), ("-w", True)),
}
#: the same within one text (`sh -c 'mysqldump -pX db | gzip'`, a log line). Between the program and
#: its option: no separator, and not the program's own name again, where a later start takes over (each
#: name scanned the next 512 characters: a megabyte of `sshpass sshpass …` cost 2-4 s; found by a
#: security review)
_SHORT_MYSQL = r"(?:mysql[a-z]*|mariadb(?:-[a-z]+)?)\b"
_SHORT_P = r"(?:sshpass|twine)\b"
_SHORT_A = r"redis-cli\b"


def _gap(name: str) -> str:
    """Up to 512 characters of one command (no `|`, `;`, `&` or newline), none where `name` starts."""
    return rf"(?:(?!(?<![\w-]){name})[^|;&\n]){{0,512}}?"


_SHORT_INLINE = re.compile(
    r"((?<![\w-])"
    rf"(?:{_SHORT_MYSQL}{_gap(_SHORT_MYSQL)}\s-p"  # attached only: `-p` alone prompts
    rf"|(?:{_SHORT_P}{_gap(_SHORT_P)}\s-p|{_SHORT_A}{_gap(_SHORT_A)}\s-a)\s?))"
    r"(?![-\s])\S+"
)
#: a URL cut short by a bound before its `@` (an argument cut at the probe's 1100 characters):
#: `postgres://app:CutSecretPassw`. What follows `user:` to the cut is taken for the password,
#: unless it is a port (digits, then the path or the end)
_CUT_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,30}://[^:/@\s\[\]]{0,256}):(?![0-9]{0,5}(?:[/?#]|$))[^@\s]*$")
#: `NAME=value` arguments (env-style) whose name says secret: `HF_TOKEN=…`, `AWS_SECRET_ACCESS_KEY=…`,
#: `TS_AUTHKEY=…`, `DB_PW=…`, `NCCL_PWD=…` (the last three shown whole; found by a security review). The
#: shell's `PWD` and `OLDPWD` have no `_` before: a working directory, never masked
_ENV_NAME = (
    r"(?:[A-Z][A-Z0-9_]{0,64})?(?:PASSWORD|PASSWD|(?<![A-Z])PASS|_PASS|_PWD|_PW|TOKEN|SECRET|_KEY|APIKEY|AUTHKEY)="
)
_ENV_ASSIGN = re.compile(rf"^({_ENV_NAME}).+$")
#: the same at the head of a script (`sh -c 'PGPASSWORD=X pg_dump …'`): the value to its first blank
#: or separator, the script after it kept (it was masked whole, the stuck command unseen; found by a helper)
_ENV_ASSIGN_HEAD = re.compile(rf"^({_ENV_NAME})" r"(?:'[^']*'|\"[^\"]*\"|[^\s;&|]+)(?=[\s;&|])")
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
#: programs whose positional argument after a subcommand is the key: `wandb login KEY`, `vastai set
#: api-key KEY`, `ngrok config add-authtoken TOKEN` (ngrok 2's `ngrok authtoken TOKEN`); each shown
#: whole (found by a security review)
_KEY_ARG = {
    "wandb": (("login",),),
    "vastai": (("set", "api-key"),),
    "ngrok": (("config", "add-authtoken"), ("config", "add-api-key"), ("authtoken",)),
}
#: their options that take a value, which is not the key (`wandb login --host URL KEY`)
_KEY_ARG_VALUED = frozenset({"--host", "--config", "--url", "--api-key", "--log", "--log-level"})
#: the same within one text (`sh -c 'wandb login X && python train.py'`, a log line): the first word
#: after the subcommand and its options (a URL after `--host` is not the key)
_KEY_ARG_INLINE = re.compile(
    r"((?<![\w-])(?:wandb\s+login|vastai\s+set\s+api-key|ngrok\s+(?:config\s+add-(?:authtoken|api-key)|authtoken))"
    r"(?:\s+--host\s+[^\s;&|]{1,256}+|\s+-[^\s;&|]{1,64}+){0,4}+\s+)"
    r"(?!-|https?://)(?:'[^']*'|\"[^\"]*\"|[^\s;&|'\"]+)"
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
    text = _AUTH_KEY.sub(rf"\1{MASK}", text)
    text = _AUTH.sub(rf"\1{MASK}", text)
    text = _TOKEN_SHAPE.sub(MASK, text)
    text = _SHORT_INLINE.sub(rf"\1{MASK}", text)
    text = _LOGIN_INLINE.sub(rf"\1{MASK}", text)
    text = _KEY_ARG_INLINE.sub(rf"\1{MASK}", text)
    return _INLINE_OPTION.sub(rf"\1{MASK}", text)


#: The lines of a PEM private key: everything from its BEGIN line to its END line is masked. A PGP
#: private key block (`-----BEGIN PGP PRIVATE KEY BLOCK-----`) too: its body was shown whole (found by
#: a security review)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----")


#: A line of a PEM body: base64, or one of its headers (`Proc-Type:`, `DEK-Info:`)
_PEM_BODY = re.compile(r"^\s*(?:[A-Za-z0-9+/=]{8,}|Proc-Type:.*|DEK-Info:.*)\s*$")
#: The lines right above an END line, under the body: PGP's `=CRC` checksum, and a last body line of
#: fewer than 8 characters (the 64-character lines' remainder): either stopped the walk up, which
#: then masked nothing above them (found by a security review)
_PEM_TAIL = re.compile(r"^\s*(?:=[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{1,7}={0,2})\s*$")
#: A PuTTY private key (`PuTTY-User-Key-File-2:`/`-3:`): its public lines are kept; the N base64 lines
#: after `Private-Lines: N`, and `Private-MAC:`'s value, are masked (shown whole; found by a security review)
_PUTTY_PRIVATE = re.compile(r"^\s*Private-Lines:\s*([0-9]{1,4})\s*$")
_PUTTY_MAC = re.compile(r"^(\s*Private-MAC:\s*)\S")
_BASE64_LINE = re.compile(r"^\s*[A-Za-z0-9+/=]+\s*$")


def _mask_body_above(out: list[str], lines: list[str]) -> None:
    """The lines of a key's body right above an END line (or PuTTY's `Private-MAC:`), masked in
    `out`: a window that opened inside the body showed no BEGIN line."""
    k = len(out)
    for _ in range(2):
        if k > 0 and _PEM_TAIL.match(lines[k - 1]):
            k -= 1
    while k > 0 and _PEM_BODY.match(lines[k - 1]):
        k -= 1
    out[k:] = [MASK] * (len(out) - k)


def redact_lines(lines: list[str]) -> list[str]:
    """Lines of a log, each masked as redact_text masks it, and a PEM private key's body masked whole
    (its lines hold no word that says secret: a log tail printed it; found by a helper). A tail's
    window can open inside a key: an END line with no BEGIN before it masks the body lines above it
    (46 lines of a 4096-bit key showed so; found by a helper)."""
    out: list[str] = []
    in_key = False
    putty_left = 0  # lines of a PuTTY key's Private-Lines still to mask
    for line in lines:
        if in_key:
            end = _PEM_END.search(line)
            in_key = end is None
            out.append(MASK if end is None else MASK + " " + line[end.start() :])
            continue
        if putty_left and _BASE64_LINE.match(line):
            putty_left -= 1
            out.append(MASK)
            continue
        putty_left = 0
        if (end := _PEM_END.search(line)) is not None:
            _mask_body_above(out, lines)
            body = line[: end.start()]
            out.append((MASK + " " if body.strip() else "") + line[end.start() :])
            continue
        if (m := _PEM_BEGIN.search(line)) is not None:
            end = _PEM_END.search(line, m.end())
            in_key = end is None
            out.append(line[: m.end()] + ("" if end is None else f" {MASK} " + line[end.start() :]))
            continue
        if (m := _PUTTY_PRIVATE.match(line)) is not None:
            putty_left = int(m.group(1))
            out.append(line)
            continue
        if (m := _PUTTY_MAC.match(line)) is not None:
            _mask_body_above(out, lines)
            out.append(m.group(1) + MASK)
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
    # found by a security review: token shapes' prefixes, and twine's `-p` (`wandb login KEY`, `vastai
    # set api-key KEY` and ngrok's `authtoken` hold "login", "key" or "token": `wandb: …` lines, which
    # fill a training log's tail, are passed untouched)
    "tskey",
    "sk_live",
    "sk_test",
    "sk_prod",
    "rk_live",
    "rk_test",
    "rk_prod",
    "aiza",
    "pypi-age",
    "npm_",
    "asia",
    "dop_v1_",
    "doo_v1_",
    "dor_v1_",
    "dapi",
    "twine",
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
    elif prog.startswith("python") and len(argv) > 2 and argv[1] == "-m":
        prog = argv[2]  # `python3 -m twine upload -p X`: the module is the program
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
    key_at = _key_arg(prog, argv)
    if argv:  # the program: its own name, never an option's value
        out.append(redact_text(argv[0]))
        changed = out[0] != argv[0]
    for i, arg in enumerate(argv[1:], 1):
        new = arg
        if hide_next or i == key_at:
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


def _key_arg(prog: str, argv: tuple[str, ...]) -> int:
    """Where `wandb login KEY`'s KEY (or another `_KEY_ARG` program's) stands in `argv`: the first
    argument after the subcommand that is neither an option nor an option's value; 0 where none."""
    for words in _KEY_ARG.get(prog, ()):
        n = len(words)
        at = next((i + n for i in range(1, len(argv) - n + 1) if argv[i : i + n] == words), 0)
        while 0 < at < len(argv):
            if argv[at] in _KEY_ARG_VALUED:
                at += 2
            elif argv[at].startswith("-"):
                at += 1
            else:
                return at
    return 0
