"""No password reaches any output: a history URL's password, whatever characters it holds, in
errors, `display` and export's source; secrets in any process's argv (vastprobe's own `--history`
URL included, which the local probe sees) masked in snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.sshd import dead_port
from vastprobe.history.engine import display, reason, url_secrets
from vastprobe.untrusted.secrets import redact_argv, redact_text

# one password per character class that urlsplit or a naive regex cut short
PASSWORDS = ["plainS3cret", "sl/ash0Z", "qu?ery0Z", "ha#sh0Z", "a@t0Zsign", "co:lon0Z", "pe%2Fcent0Z", "sp ace0Z"]


def expect(mask: Callable[[Any], Any], cases: dict[Any, Any]) -> None:
    """Each case masked as its value shows it (the case itself in the message: which one failed)."""
    for case, shown in cases.items():
        assert mask(case) == shown, case


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_history_url_is_shown_without_its_password(password: str) -> None:
    url = f"postgresql://vp:{password}@db.example:5432/fleet?connect_timeout=3"
    shown = display(url)
    assert shown == "postgresql://vp@db.example:5432/fleet?connect_timeout=3", shown
    assert password in url_secrets(url)
    err = reason(ValueError(f'invalid URI query parameter: "{url}"'), url_secrets(url))
    for part in (password, *password.split("/"), *password.split("?"), *password.split("#")):
        if len(part) >= 4:
            assert part not in shown and part not in err, (part, shown, err)


def test_a_libpq_keyword_string_is_shown_without_its_password() -> None:
    assert display("host=db password=hunter2xy dbname=fleet") == "host=db password=*** dbname=fleet"


def test_secret_arguments_are_masked() -> None:
    argv = ("trainer", "--password", "pw-one-1", "--api-key=pw-two-2", "HF_TOKEN=pw-three-3",
            "postgresql://u:pw/four#4@h/db", "host=h password=pw-five-5", "--lr", "0.1")  # fmt: skip
    out = redact_argv(argv)
    assert not any("pw" in a for a in out), out
    assert out[0] == "trainer" and out[-2:] == ("--lr", "0.1") and out[1] == "--password" and out[2] == "***"
    plain = ("ssh", "-p", "2222", "root@203.0.113.7", "true")
    assert redact_argv(plain) is plain  # nothing to mask: the same tuple


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_url_libpq_cannot_read_is_refused_without_its_password(password: str) -> None:
    url = f"postgresql://vp:{password}x?y@127.0.0.1:{dead_port()}/fleet?connect_timeout=2"
    r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--sample", "0", "--history", url],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    secret = url[len("postgresql://vp:") : url.rindex("@")]
    leaked = [p for p in [secret, *secret.replace("?", "/").replace("#", "/").replace("@", "/").split("/")]
              if len(p) >= 3 and p in r.stdout + r.stderr]  # fmt: skip
    assert not leaked, (leaked, r.returncode, r.stderr)


def test_no_password_in_a_snapshot_or_an_error_vastprobes_own_argv_included() -> None:
    """vastprobe's own argv is in the snapshot (the local probe sees it); a job's secrets in its
    argv too. The history here cannot be written (a dead port): the error line names the URL
    without its password, and nothing of the password is anywhere in the output."""
    port = dead_port()
    url = f"postgresql://vp:Zq9x-w_vu@127.0.0.1:{port}/fleet?connect_timeout=2"
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--token", "tok-Zq9xwvu",
                            "HF_TOKEN=hf-Zq9xwvu"])  # fmt: skip
    try:
        r = subprocess.run([sys.executable, "-m", "vastprobe", "diagnose", "local", "--sample", "0", "--format", "json",
                            "--snapshot", "--history", url], capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        job.kill()
        job.wait()
    out = r.stdout + r.stderr
    for part in ("Zq9x-w_vu", "tok-Zq9xwvu", "hf-Zq9xwvu"):
        assert part not in out, (part, r.returncode, r.stderr[-300:])
    procs = json.loads(r.stdout)["hosts"][0]["snapshot"]["processes"]
    ours = next(p for p in procs if p["pid"] == job.pid)
    assert ours["cmdline"][-3:] == ["--token", "***", "HF_TOKEN=***"], ours["cmdline"]
    # this run's own vastprobe: another test's, running meanwhile on this machine, has another --history
    me = [
        p for p in procs if any("--history" in a for a in p["cmdline"]) and f":{port}/fleet" in " ".join(p["cmdline"])
    ]
    assert me and all("postgresql://vp:***@127.0.0.1" in " ".join(p["cmdline"]) for p in me), me


def test_more_secret_forms_are_masked() -> None:
    """Forms a helper found printed whole: `--secret-key=`, `--db-pass X`, `--pass=`, `--passphrase=`,
    `--credentials=`, and `--password X` inside one `sh -c` string. A flag that only ends like one
    (`--bypass`, `--auth-required`) hides nothing."""
    argv = ("app", "--secret-key=pw-1", "--db-pass", "pw-2", "--pass=pw-3", "--passphrase=pw-4",
            "--credentials=pw-5", "--bypass", "keep-me", "sh", "-c", "run --password pw-6 --token=pw-7 --lr 0.1")  # fmt: skip
    out = redact_argv(argv)
    assert not any("pw-" in a for a in out), out
    assert out[7:9] == ("--bypass", "keep-me") and out[-1].endswith("--lr 0.1"), out


def test_allowed_environment_values_and_a_given_logs_tail_are_masked() -> None:
    """An allow-listed variable is kept by name, but its value may hold a credential
    (`MASTER_ADDR=http://user:PASSWORD@host`, a run id of `token=…`); and a `--log` prints what its
    job was given. Only found logs' tails were masked (found by a helper)."""
    from vastprobe.parsers.environ import parse_env_section
    from vastprobe.parsers.logs import log_tail
    from vastprobe.probe.sections import RawSection

    env = parse_env_section(
        "/proc/7/environ:MASTER_ADDR=http://u:pw-8@10.0.0.1\n/proc/7/environ:TORCHELASTIC_RUN_ID=token=pw-9\n"
    )
    assert dict(env[7]) == {"MASTER_ADDR": "http://u:***@10.0.0.1", "TORCHELASTIC_RUN_ID": "token=***"}, env
    tail = log_tail(RawSection("log.0", "|connecting to postgres://app:pw-10@db\n|login --password pw-11 ok\n", 0))
    assert isinstance(tail, str) and "pw-1" not in tail and "postgres://app:***@db" in tail, tail


def test_underscored_dotted_mapped_and_shaped_secrets_are_masked() -> None:
    """Forms a hostile-tenant helper found printed whole: option names in argparse's spelling
    (`--db_password X`, `--hf_token=X`, `--api_key X`), a Java property (`-Dspring.datasource.password=X`),
    a JSON or YAML key (`"password": "X"`), `--pw X`, curl's `-u user:password`, a bearer token, and
    tokens by their issuers' shapes (`export HF_TOKEN hf_…`). Words that only look alike stay."""
    hf, ghp = "hf_" + "a1B2" * 9, "ghp_" + "Zz9" * 12
    argv = ("python3", "--db_password", "pw-1", "--hf_token=pw-2", "--api_key", "pw-3",
            "-Dspring.datasource.password=pw-4", "--access_token", "pw-5", '{"password": "pw-6"}', "--pw", "pw-7",
            "--lr", "0.1", "--keep", "3")  # fmt: skip
    out = redact_argv(argv)
    assert not any("pw-" in a for a in out), out
    assert out[-4:] == ("--lr", "0.1", "--keep", "3"), out
    assert redact_argv(("curl", "-u", "alice:pw-8", "https://x"))[2] == "***"
    assert redact_argv(("docker", "run", "-u", "1000:1000", "img"))[3] == "1000:1000"  # not curl: a uid
    lines = [f"export HF_TOKEN {hf}", f"NCCL_DEBUG_FILE=x {ghp}", "Authorization: Bearer pw-9.abc",
             "retry with --db_password pw-10", "api_key: pw-11", "sh -c 'curl -sf -u bob:pw-12 https://x'"]  # fmt: skip
    for line in lines:
        shown = redact_text(line)
        assert "pw-" not in shown and hf not in shown and ghp not in shown, shown
    for same in ("tokens: 1234/s", "num_tokens: 5 loss: 0.1", "basic block 7 of 9", "the bearer of news",
                 "rsync -u src/ dst/", "see http://host:8080/path"):  # fmt: skip
        assert redact_text(same) == same


def test_short_password_options_of_database_clients_are_masked() -> None:
    """`mysql -pSECRET` (attached: `-p` alone prompts), `sshpass -p SECRET` and `redis-cli -a SECRET`
    were printed whole (left open last session). `-p` of any other program is a port and stays."""
    assert redact_argv(("mysql", "-uroot", "-ppw-1", "db")) == ("mysql", "-uroot", "-p***", "db")
    assert redact_argv(("/usr/bin/mysqldump", "-p", "db")) == ("/usr/bin/mysqldump", "-p", "db")
    assert redact_argv(("sshpass", "-p", "pw-2", "ssh", "h"))[2] == "***"
    assert redact_argv(("sshpass", "-ppw-3", "ssh", "h"))[1] == "-p***"
    assert redact_argv(("redis-cli", "-a", "pw-4", "ping"))[2] == "***"
    assert redact_argv(("ssh", "-p2222", "h")) == ("ssh", "-p2222", "h")
    for line in ("sh -c 'mysqldump -uroot -ppw-5 db | gzip'", "mariadb -h db -ppw-6 -e 'select 1'",
                 "sshpass -p pw-7 rsync -a x h:y", "redis-cli -h r -a pw-8 get k"):  # fmt: skip
        assert "pw-" not in redact_text(line), redact_text(line)
    for same in ("ssh -p 2222 host", "mysql -p db", "iperf3 -p 5201 -a 2"):
        assert redact_text(same) == same


def test_assignments_files_headers_and_keys_in_logs_and_argv_are_masked() -> None:
    """Forms a hostile-tenant helper found printed whole in log tails and command lines: argparse's
    `Namespace(api_key='…')`, ini assignments with spaces, a quoted value with a space, a value with
    a comma, `.netrc`, XML, a bare JWT, a cookie header, a signed URL's signature, `DB_PASS=`, `--auth`,
    `--wandb-key`, `--secret_value=`, and a PEM private key's body. Look-alikes stay."""
    from vastprobe.untrusted.secrets import redact_lines

    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    lines = ["Namespace(api_key='pw-1', lr=0.1)", "aws_secret_access_key = pw-2", 'password = "pw-3 and more"',
             "machine api.example.com login bob password pw-4", "<config><password>pw-5</password></config>",
             f"token {jwt}", "Cookie: sessionid=pw-6; csrftoken=pw-7",
             "GET https://b.s3.amazonaws.com/x?X-Amz-Signature=pw-8&X-Amz-Expires=3600",
             "https://example.com/f?sig=pw-9&se=2026", 'export PASSWORD="x pw-10"', "password=ab,pw-11",
             "DB_PASS=pw-12 ./run"]  # fmt: skip
    for line in lines:
        shown = redact_text(line)
        assert "pw-" not in shown and jwt not in shown, shown
    argv = ("train.py", "--auth", "pw-13", "--wandb-key", "pw-14", "--secret_value=pw-15", "REDIS_PASS=pw-16",
            "--sort-key", "name", "--author", "me", "BYPASS=1")  # fmt: skip
    out = redact_argv(argv)
    assert not any("pw-" in a for a in out), out
    assert out[-5:] == ("--sort-key", "name", "--author", "me", "BYPASS=1"), out
    key = ["ok", "-----BEGIN RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEApw17", "cGF5bG9hZA==",
           "-----END RSA PRIVATE KEY-----", "after"]  # fmt: skip
    masked = redact_lines(key)
    assert masked[0] == "ok" and masked[-1] == "after" and not any("MIIE" in x or "cGF5" in x for x in masked)
    # what the first version of these masked too (found by a helper): flags ending in auth took the
    # next argument, a cookie header the rest of a script, `auth:`, `fwd_pass=3` and code's `token = …`
    assert redact_argv(("jupyter", "--no-auth", "--port", "8888", "--enable-auth", "0.0.0.0")) == (
        "jupyter", "--no-auth", "--port", "8888", "--enable-auth", "0.0.0.0")  # fmt: skip
    script = "curl -H 'Cookie: sid=pw-20' https://x; echo done"
    assert redact_text(script) == "curl -H 'Cookie: ***' https://x; echo done"
    for same in ("tokens: 1234/s", "the author wrote", "authentic", "keyboard", "monkey=3", "signal 9",
                 "a cookie jar", "compass=north", "BYPASS=1 x", "FATAL auth: connection refused",
                 "fwd_pass=3 (retry pass=2 of 3)", "    token = tokenizer.encode(text)"):  # fmt: skip
        assert redact_text(same) == same


def test_a_secret_the_probes_own_bounds_cut_is_masked() -> None:
    """An argument cut at the probe's 1100-byte record ends inside a URL's password, its `@` gone with
    the rest; a `--log` tail of the last 4096 bytes begins inside one, its scheme gone before. Both
    were printed whole (found by a helper). A cut argument's URL is masked from its user's `:`, and
    a tail that filled its bound starts at its first whole line."""
    from vastprobe.parsers.cmdline import RECORD_BYTES, parse_cmdline_section
    from vastprobe.parsers.logs import log_tail
    from vastprobe.probe.script import ProbeParams, script_template
    from vastprobe.probe.sections import RawSection

    assert f"substr($0, 1, {RECORD_BYTES})" in script_template()  # the bound the parser knows is the probe's
    head = "/proc/42/cmdline:"
    arg = ": " + "x" * 1050 + " postgres://app:CutSecretPassword0123456789@db/x"
    (argv,) = parse_cmdline_section(f"{head}sh\n{head}-c\n{(head + arg)[:RECORD_BYTES]}\n").values()
    assert "CutSecret" not in argv[2] and argv[2].endswith("postgres://app:***"), argv[2][-40:]
    bound = ProbeParams().log_tail_bytes
    body = "p:TailSecretPw77@db:5432/train\n" + "step ok\n" * 600
    text = "".join("|" + line + "\n" for line in body.encode()[-bound:].decode().splitlines())
    tail = log_tail(RawSection("log.0", text, 0), 3, bound)
    assert isinstance(tail, str) and "TailSecret" not in tail and tail.startswith("step ok"), tail[:80]
    whole = log_tail(RawSection("log.0", "|p:x@db short file\n|step ok\n", 0), 3, bound)
    assert whole == "p:x@db short file\nstep ok\n"  # a file shorter than the bound: every line its own


def test_secrets_one_assignment_deeper_and_by_program_are_masked() -> None:
    """Forms a helper found shown whole: a secret name one `=`, `.` or quote deeper, KEY names,
    quoted Authorization headers, and programs whose option or setting is the password; the script
    after `PGPASSWORD=X` is kept, and look-alikes stay."""
    argvs = {
        ("docker", "run", "--env=HF_TOKEN=C1", "img"): ("docker", "run", "--env=HF_TOKEN=***", "img"),
        ("docker", "build", "--build-arg=GITHUB_TOKEN=C2", "."): ("docker", "build", "--build-arg=GITHUB_TOKEN=***", "."),
        ("kubectl", "create", "secret", "generic", "db", "--from-literal=password=C3"):
            ("kubectl", "create", "secret", "generic", "db", "--from-literal=password=***"),
        ("helm", "upgrade", "x", "--set", "auth.password=C4"): ("helm", "upgrade", "x", "--set", "auth.password=***"),
        ("helm", "upgrade", "x", "--set=auth.postgresPassword=C5"): ("helm", "upgrade", "x", "--set=auth.postgresPassword=***"),
        ("redis-server", "--requirepass", "C6", "--masterauth", "C7"): ("redis-server", "--requirepass", "***", "--masterauth", "***"),
        ("aws", "configure", "set", "aws_secret_access_key", "C9"): ("aws", "configure", "set", "aws_secret_access_key", "***"),
        ("aws", "configure", "set", "region", "us-east-1"): ("aws", "configure", "set", "region", "us-east-1"),
        ("docker", "login", "-u", "me", "-p", "C10", "reg"): ("docker", "login", "-u", "me", "-p", "***", "reg"),
        ("docker", "run", "-p", "8080:80", "img"): ("docker", "run", "-p", "8080:80", "img"),
        ("sh", "-c", "PGPASSWORD=C11 pg_dump -h db app | gzip"): ("sh", "-c", "PGPASSWORD=*** pg_dump -h db app | gzip"),
        ("sqlcmd", "-S", "db", "-U", "sa", "-P", "C12"): ("sqlcmd", "-S", "db", "-U", "sa", "-P", "***"),
        ("ldapsearch", "-x", "-w", "C13"): ("ldapsearch", "-x", "-w", "***"),
        ("python", "train.py", "--max_tokens=512", "--tokenizer=gpt2", "--num_keys=3"):
            ("python", "train.py", "--max_tokens=512", "--tokenizer=gpt2", "--num_keys=3"),
        # programs' own spellings, left open by the last session (found by a helper)
        ("openssl", "enc", "-aes-256-cbc", "-k", "C14", "-in", "f"): ("openssl", "enc", "-aes-256-cbc", "-k", "***", "-in", "f"),
        ("openssl", "rsa", "-passin", "pass:C15"): ("openssl", "rsa", "-passin", "***"),
        ("openssl", "enc", "-K", "C16", "-iv", "01"): ("openssl", "enc", "-K", "***", "-iv", "01"),
        ("htpasswd", "-bc", "/etc/pw", "u", "C17"): ("htpasswd", "-bc", "/etc/pw", "u", "***"),
        ("htpasswd", "-c", "/etc/pw", "u"): ("htpasswd", "-c", "/etc/pw", "u"),
        ("smbclient", "//srv/x", "-U", "me%C18"): ("smbclient", "//srv/x", "-U", "me%***"),
        ("smbclient", "//srv/x", "--user=me%C19"): ("smbclient", "//srv/x", "--user=me%***"),
        ("sh", "-c", "docker login -u me -p C20 reg.io && docker push x"):
            ("sh", "-c", "docker login -u me -p *** reg.io && docker push x"),
        ("sh", "-c", "aws configure set aws_secret_access_key C21; aws s3 ls"):
            ("sh", "-c", "aws configure set aws_secret_access_key ***; aws s3 ls"),
        ("sh", "-c", "docker run -p 8080:80 img"): ("sh", "-c", "docker run -p 8080:80 img"),
        ("python", "-c", "print('50%')"): ("python", "-c", "print('50%')"),
        # a wrapper script run by its interpreter: the script's name is the program (new user's review)
        ("/bin/sh", "/usr/local/bin/mysql", "-uroot", "-pC22", "prod"):
            ("/bin/sh", "/usr/local/bin/mysql", "-uroot", "-p***", "prod"),
        ("sh", "/opt/run.sh", "-p", "8080"): ("sh", "/opt/run.sh", "-p", "8080"),
    }  # fmt: skip
    expect(redact_argv, argvs)
    lines = {
        "SECRET_KEY='L1' DEBUG=False": "SECRET_KEY=*** DEBUG=False",
        'secret_key = "L2"': "secret_key = ***",
        "ENCRYPTION_KEY=L3": "ENCRYPTION_KEY=***",
        'dsn="password=L5 host=db"': 'dsn="password=*** host=db"',
        "{'Authorization': 'Basic L6'}": "{'Authorization': 'Basic ***",
        '{"authorization": "Basic L7"}': '{"authorization": "Basic ***',
        "Endpoint=x;AccountKey=L8": "Endpoint=x;AccountKey=***",
        "+ docker run --env=HF_TOKEN=L9 --rm img": "+ docker run --env=HF_TOKEN=*** --rm img",
        "os.environ['HF_TOKEN'] = 'L10'": "os.environ['HF_TOKEN'] = ***",
        "GET https://api.x.com/v1?auth=L11 200": "GET https://api.x.com/v1?auth=*** 200",
        "git clone https://L12aaaaaaaaaaaaaaaaaaaaaaaa@github.com/x.git": "git clone https://***@github.com/x.git",
        "post https://hooks.slack.com/services/T0/B0/L13": "post https://hooks.slack.com/services/***",
        "step 10 loss=0.3 tokens=5123 max_tokens=512 monkey=3 hotkey=F1": "step 10 loss=0.3 tokens=5123 max_tokens=512 monkey=3 hotkey=F1",
    }  # fmt: skip
    expect(redact_text, lines)


def test_a_pem_key_is_masked_in_held_tails_and_where_the_window_opens_inside_it() -> None:
    from vastprobe.parsers.held import _tail_text
    from vastprobe.untrusted.secrets import redact_lines

    key = ["-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAAKEY1", "-----END OPENSSH PRIVATE KEY-----"]
    held = _tail_text(["step 1", *key, "step 2"], 0)
    assert "KEY1" not in held and "step 2" in held and held.startswith("step 1\n-----BEGIN")
    # the window opens in the key's body: the body lines above its END line go, the lines before them stay
    cut = [
        "progress 9",
        "MIIJKAIBAAKCAgEAKEY2",
        "Proc-Type: 4,ENCRYPTED",
        "aGVsbG8gd29ybGQKEY3",
        "-----END RSA PRIVATE KEY-----",
        "done",
    ]
    assert redact_lines(cut) == ["progress 9", "***", "***", "***", "-----END RSA PRIVATE KEY-----", "done"]
    assert redact_lines(["step 5", "-----END CERTIFICATE-----"]) == ["step 5", "-----END CERTIFICATE-----"]


# Forms a security review found printed whole in `--snapshot`'s command lines and log tails. Tokens
# are built from parts so that no scanner takes this file for a leak.
TS_KEY = "tskey-auth-" + "kQ7bX2mCNTRL" + "-" + "S9fUNeg6kBAcDXWxtP4sTMUn9iMRzAd4"


def test_tailscale_auth_keys_are_masked_and_auth_flags_stay() -> None:
    """tailscale's `--authkey=X` / `--auth-key X` (argv and a line), `TS_AUTHKEY=X`; the flags that only
    end in auth (`--no-auth`, `--enable-auth`) take no value."""
    argvs = {
        ("tailscale", "up", f"--authkey={TS_KEY}", "--ssh"): ("tailscale", "up", "--authkey=***", "--ssh"),
        ("tailscale", "up", "--auth-key", "C1", "--hostname", "n1"): ("tailscale", "up", "--auth-key", "***", "--hostname", "n1"),
        ("tailscaled", "TS_AUTHKEY=C2"): ("tailscaled", "TS_AUTHKEY=***"),
        ("jupyter", "--no-auth", "--port", "8888", "--enable-auth", "x"): ("jupyter", "--no-auth", "--port", "8888", "--enable-auth", "x"),
    }  # fmt: skip
    expect(redact_argv, argvs)
    lines = {
        f"sh -c 'tailscale up --authkey={TS_KEY} --ssh'": "sh -c 'tailscale up --authkey=*** --ssh'",
        "+ tailscale up --auth-key L1 --accept-routes": "+ tailscale up --auth-key *** --accept-routes",
        "export TS_AUTHKEY=L2": "export TS_AUTHKEY=***",
        "serve --no-auth --port 8888": "serve --no-auth --port 8888",
    }  # fmt: skip
    expect(redact_text, lines)


def test_a_docker_configs_auth_key_is_masked_and_author_stays() -> None:
    """A registry's `"auth": "BASE64(user:password)"` (a Docker config, `DOCKER_AUTH_CONFIG`, a log
    line), `_auth`-suffixed keys and npm's `_auth=`; `"author"`, `oauth_url`, a boolean, and a word
    after `auth:` in a log stay."""
    b64 = "dXNlcjpwYXNzd29yZDEyMzQ1Ng=="
    lines = {
        '{"auths":{"r.io":{"auth":"' + b64 + '"}}}': '{"auths":{"r.io":{"auth":***}}}',
        'DOCKER_AUTH_CONFIG={"auths": {"r.io": {"auth": "' + b64 + '", "email": "a@b"}}}':
            'DOCKER_AUTH_CONFIG={"auths": {"r.io": {"auth": ***, "email": "a@b"}}}',
        "registry auth: " + b64: "registry auth: ***",
        '{"basic_auth": "' + b64 + '"}': '{"basic_auth": ***}',
        "_auth=" + b64: "_auth=***",
        "//registry.npmjs.org/:_authToken=C3": "//registry.npmjs.org/:_authToken=***",
        '{"author": "Jane Doe", "oauth_url": "https://x/o", "requires_auth": true}':
            '{"author": "Jane Doe", "oauth_url": "https://x/o", "requires_auth": true}',
        "FATAL auth: connection refused": "FATAL auth: connection refused",
        "auth: ok": "auth: ok",
    }  # fmt: skip
    expect(redact_text, lines)
    argv = ("sh", "-c", 'echo \'{"auths":{"r.io":{"auth":"' + b64 + "\"}}}' > ~/.docker/config.json")
    assert b64 not in redact_argv(argv)[2], redact_argv(argv)


def test_pgp_and_putty_private_keys_are_masked_in_log_lines() -> None:
    """A PGP private key block's body (its armor headers, base64 and `=CRC` checksum), also where the
    window opens inside it and its last body line is short; a PuTTY key's Private-Lines body and its
    Private-MAC, its public lines kept."""
    from vastprobe.untrusted.secrets import redact_lines

    pgp = ["gpg: exporting", "-----BEGIN PGP PRIVATE KEY BLOCK-----", "", "lQOYBGXkPGP1AQgA0jYmFy",
           "Zm9vYmFyPGP2", "=nJyT", "-----END PGP PRIVATE KEY BLOCK-----", "done"]  # fmt: skip
    out = redact_lines(pgp)
    assert out[0] == "gpg: exporting" and out[-1] == "done" and out[1] == pgp[1], out
    assert not any("PGP1" in x or "PGP2" in x or "nJyT" in x for x in out), out
    cut = ["step 9", "lQOYBGXkPGP3AQgA0jYmFy", "Ab3", "=nJyT", "-----END PGP PRIVATE KEY BLOCK-----", "ok"]
    assert redact_lines(cut) == ["step 9", "***", "***", "***", "-----END PGP PRIVATE KEY BLOCK-----", "ok"]
    pem_short_tail = ["progress 9", "MIIJKAIBAAKCAgEAKEY4aaaa", "Ag==", "-----END RSA PRIVATE KEY-----"]
    assert redact_lines(pem_short_tail) == ["progress 9", "***", "***", "-----END RSA PRIVATE KEY-----"]
    putty = ["PuTTY-User-Key-File-3: ssh-ed25519", "Encryption: none", "Comment: eddsa-key-20240101",
             "Public-Lines: 2", "AAAAC3NzaC1lZDI1NTE5AAAAIPUBLIC1", "cHVibGlj", "Private-Lines: 2",
             "AAAAIPRIV1xQzY2Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDEy", "PRIV2", "Private-MAC: 3f9c2a7eMAC0b1c2d3e4f",
             "next"]  # fmt: skip
    out = redact_lines(putty)
    assert out[:7] == putty[:7] and out[-1] == "next", out
    assert out[7:10] == ["***", "***", "Private-MAC: ***"], out
    window = ["step 3", "AAAAIPRIV3xQzY2Njc4OTAx", "Zz", "Private-MAC: 3f9c2a7eMAC0b1c2d3e4f"]
    assert redact_lines(window) == ["step 3", "***", "***", "Private-MAC: ***"]
    assert redact_lines(["step 5", "=nJyT", "ok"]) == ["step 5", "=nJyT", "ok"]  # no END after it: kept


def test_more_issuers_token_shapes_are_masked_and_look_alikes_stay() -> None:
    """Tokens by their issuers' documented shapes and lengths, wherever they stand: Tailscale, Stripe,
    Google API keys, PyPI (and TestPyPI), npm, Anthropic, AWS temporary key ids, DigitalOcean and
    Databricks. Words that share a prefix, hashes and UUIDs stay."""
    tokens = [
        TS_KEY,
        "tskey-api-" + "kAbCdE1CNTRL" + "-" + "091234567890ABCDEFgh",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_test_" + "51Hx" * 12,
        "AIza" + "SyD-9tSrke72PouQMnMX_a7eZSW0jkFMBWY",
        "pypi-" + "AgEIcHlwaS5vcmc" + "CJDk2ZjBmZjA0LTZmZTYtNDQ5Yi05YjZjLTE1ZmE4ZDE2NzVhMwACKlsz",
        "pypi-" + "AgENdGVzdC5weXBpLm9yZ" + "wIkOTZmMGZmMDQtNmZlNi00NDliLTliNmMtMTVmYThkMTY3NWEzAA",
        "npm_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2",
        "sk-ant-api03-" + "Zx9_" * 23 + "aAA",
        "ASIA" + "Y34FZKBOKMUTVV7A",
        "dop_v1_" + "0123456789abcdef" * 4,
        "dapi" + "0123456789abcdef" * 2,
    ]
    for token in tokens:
        for line in (token, f"export KEY_VALUE {token} done", f'{{"value": "{token}"}}'):
            shown = redact_text(line)
            assert token not in shown and token[-12:] not in shown, (token, shown)
    for same in ("pip install scikit-learn sk-learn", "pip index: pypi-simple pypi-server", "npm_config_cache=/tmp/npm",
                 "commit 3f9c2a7e1b0d4c5e6f7a8b9c0d1e2f3a4b5c6d7e", "run 123e4567-e89b-12d3-a456-426614174000 ok",
                 "tskey-auth is read from a file", "sk_live_mode=false", "AIzaBad", "ASIA/Tokyo", "dapi=3",
                 "docker run -p 8080:80 img"):  # fmt: skip
        assert redact_text(same) == same, same


def test_programs_whose_positional_argument_is_a_key_are_masked() -> None:
    """`wandb login KEY`, `vastai set api-key KEY`, `ngrok config add-authtoken TOKEN` (and ngrok 2's
    `ngrok authtoken TOKEN`), twine's `-p PASSWORD`: as arguments and within one text; their other
    arguments, and `-p` of other programs, stay."""
    argvs = {
        ("wandb", "login", "C1"): ("wandb", "login", "***"),
        ("wandb", "login", "--relogin", "--host", "https://w.example", "C2"):
            ("wandb", "login", "--relogin", "--host", "https://w.example", "***"),
        ("wandb", "login", "--relogin"): ("wandb", "login", "--relogin"),
        ("/usr/local/bin/vastai", "set", "api-key", "C3"): ("/usr/local/bin/vastai", "set", "api-key", "***"),
        ("vastai", "show", "instances"): ("vastai", "show", "instances"),
        ("ngrok", "config", "add-authtoken", "C4"): ("ngrok", "config", "add-authtoken", "***"),
        ("ngrok", "authtoken", "C5"): ("ngrok", "authtoken", "***"),
        ("ngrok", "http", "8080"): ("ngrok", "http", "8080"),
        ("twine", "upload", "-u", "__token__", "-p", "C6", "dist/*"): ("twine", "upload", "-u", "__token__", "-p", "***", "dist/*"),
        ("python3", "-m", "twine", "upload", "-pC7", "dist/x.whl"): ("python3", "-m", "twine", "upload", "-p***", "dist/x.whl"),
        ("python3", "-m", "wandb", "login", "C8"): ("python3", "-m", "wandb", "login", "***"),
        ("docker", "run", "-p", "8080:80", "img"): ("docker", "run", "-p", "8080:80", "img"),
    }  # fmt: skip
    expect(redact_argv, argvs)
    lines = {
        "sh -c 'wandb login L1'": "sh -c 'wandb login ***'",
        "+ wandb login --relogin L2 && python train.py": "+ wandb login --relogin *** && python train.py",
        "vastai set api-key L3; vastai show instances": "vastai set api-key ***; vastai show instances",
        "ngrok config add-authtoken L4": "ngrok config add-authtoken ***",
        "ngrok authtoken L5 --config /x.yml": "ngrok authtoken *** --config /x.yml",
        "python -m twine upload -u __token__ -p L6 dist/*": "python -m twine upload -u __token__ -p *** dist/*",
        "wandb login --host https://w.example": "wandb login --host https://w.example",
        "wandb: Currently logged in as: me": "wandb: Currently logged in as: me",
        "docker run -p 8080:80 img": "docker run -p 8080:80 img",
    }  # fmt: skip
    expect(redact_text, lines)


def test_pwd_and_pw_named_assignments_are_masked_but_the_working_directory_stays() -> None:
    """`NAME=value` with a name ending `_PWD` or `_PW` (argv, a script's head, a line); the shell's
    `PWD` and `OLDPWD` (a path) stay, as an ODBC string's `PWD=` does not."""
    argvs = {
        ("env", "NCCL_PWD=C1", "DB_PW=C2", "PWD=/root", "OLDPWD=/tmp", "run"):
            ("env", "NCCL_PWD=***", "DB_PW=***", "PWD=/root", "OLDPWD=/tmp", "run"),
        ("sh", "-c", "DB_PW=C3 ./migrate"): ("sh", "-c", "DB_PW=*** ./migrate"),
    }  # fmt: skip
    expect(redact_argv, argvs)
    lines = {
        "DB_PW=L1 ./run": "DB_PW=*** ./run",
        "env PWD=/home/x OLDPWD=/tmp ls": "env PWD=/home/x OLDPWD=/tmp ls",
        "Driver=x;UID=sa;PWD=L2;": "Driver=x;UID=sa;PWD=***",
    }  # fmt: skip
    expect(redact_text, lines)
