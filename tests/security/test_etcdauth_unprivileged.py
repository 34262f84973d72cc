"""etcd as unprivileged users meet it on a real local DAC (uids 1234 and 5678, not root):
without the client certificate's key and a role's credential, etcd answers nothing, and
neither the credentials, the key, the hooks' token cache nor etcd's data are readable."""

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from daclocal import cluster

USERS = [(1234, 4321), (5678, 8765)]
BIN = Path(sys.executable).parent
# The venv's python lives under /root, which users cannot enter: a user's dacctl runs under
# the system python3 with the venv's site-packages (as tests/system/test_admin_cli.py does).
DACCTL = [
    "/usr/bin/python3",
    "-c",
    "import site, sys; site.addsitedir(sys.argv.pop(1)); "
    "from dacctl.main import main; sys.exit(main(sys.argv[1:]))",
    sysconfig.get_paths()["purelib"],
]

# Run as the user, with the system interpreter: what any local account can do.
PROBE = r"""
import json, socket, ssl, sys
host, port, path, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
body = json.dumps({"key": "L2RhYy92MS8=", "range_end": "L2RhYy92MTA=", "value": "eA=="}).encode()
req = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
try:
    sock = socket.create_connection((host, port), timeout=5)
    if cafile != "-":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cafile)
        sock = ctx.wrap_socket(sock, server_hostname=host)
    sock.sendall(req)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    print(data.decode("latin-1").split("\r\n", 1)[0] + " " + data.decode("latin-1")[-300:])
except (OSError, ssl.SSLError) as e:
    print(f"refused: {type(e).__name__}: {e}")
"""


def as_user(uid, gid, *argv, env=None):
    return subprocess.run(
        list(argv),
        user=uid,
        group=gid,
        extra_groups=[gid],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        env=env or {"PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def dac():
    assert os.geteuid() == 0, "this test starts a local DAC: run it as root"
    top = Path(tempfile.mkdtemp(prefix="dac-etcdauth-"))
    top.chmod(0o755)  # users may enter, as on a real machine where they see /etc/dac
    state = cluster.up(
        top / "dac", servers=1, bricks_per_server=2, brick_size=512 << 20, timeout=60
    )
    # a hook call as root (SlurmUser here) leaves root's token cache behind
    r = subprocess.run(
        [str(BIN / "dacctl"), "--function", "pools"],
        capture_output=True,
        text=True,
        env={**os.environ, "DAC_CONFIG": str(state.config_path)},
    )
    assert r.returncode == 0 and json.loads(r.stdout)["pools"], r
    yield state
    cluster.down(top / "dac")
    shutil.rmtree(top, ignore_errors=True)


def endpoint(state):
    return "127.0.0.1", state.etcd["client_port"]


@pytest.mark.parametrize("uid,gid", USERS)
@pytest.mark.parametrize("path", ["/v3/kv/range", "/v3/kv/put", "/v3/auth/authenticate"])
def test_plain_http_and_the_ca_alone_get_nothing_from_etcd(dac, uid, gid, path):
    host, port = endpoint(dac)
    ca = str(Path(dac.workdir) / "etcd" / "pki" / "ca.pem")
    assert as_user(uid, gid, "cat", ca).returncode == 0  # the CA is public: users have it
    plain = as_user(uid, gid, "/usr/bin/python3", "-c", PROBE, host, str(port), path, "-")
    assert "200 OK" not in plain.stdout and '"kvs"' not in plain.stdout, plain
    with_ca = as_user(uid, gid, "/usr/bin/python3", "-c", PROBE, host, str(port), path, ca)
    assert with_ca.stdout.startswith("refused:"), with_ca  # no client certificate: no TLS
    # the peer port too: raft messages from a local user must not reach etcd
    peer = as_user(
        uid, gid, "/usr/bin/python3", "-c", PROBE, host, str(dac.etcd["peer_port"]), "/members", ca
    )
    assert peer.stdout.startswith("refused:"), peer


@pytest.mark.parametrize("uid,gid", USERS)
def test_credentials_client_key_token_cache_and_data_are_unreadable(dac, uid, gid):
    etcd_dir = Path(dac.workdir) / "etcd"
    caches = glob.glob("/var/cache/dac/etcd-token-*.json")
    assert caches, "root's hook call left no token cache"
    secrets: list[Path | str] = [
        *(etcd_dir / "credentials").iterdir(),
        etcd_dir / "pki" / "client.key",
        etcd_dir / "pki" / "server.key",
        etcd_dir / "pki" / "ca.key",
        *caches,
    ]
    assert {p.name for p in (etcd_dir / "credentials").iterdir()} >= {
        "dacd",
        "slurm",
        "admin",
        "root",
    }
    for path in secrets:
        st = os.stat(path)
        assert st.st_uid == 0 and st.st_mode & 0o077 == 0, path
        r = as_user(uid, gid, "cat", str(path))
        assert r.returncode != 0 and "Permission denied" in r.stderr, (path, r)
    r = as_user(uid, gid, "ls", str(etcd_dir / "etcd-data"))
    assert r.returncode != 0 and "Permission denied" in r.stderr
    # nor may a user plant a token where root's hooks would read it
    r = as_user(uid, gid, "touch", "/var/cache/dac/etcd-token-planted.json")
    assert r.returncode != 0


@pytest.mark.parametrize("uid,gid", USERS)
def test_dacs_commands_as_a_user_have_no_credential_and_say_so_in_one_line(dac, uid, gid):
    env = {"PATH": "/usr/bin:/bin", "DAC_CONFIG": str(dac.config_path)}
    # the hook is Slurm's alone; `hosts` (an admin view: it names every buffer) reads etcd
    for argv, says in ((["--function", "pools"], "for Slurm only"), (["hosts"], "cannot read")):
        r = as_user(uid, gid, *DACCTL, *argv, env=env)
        out = (r.stdout + r.stderr).strip()
        assert r.returncode != 0 and '"pools"' not in out, (argv, out)
        assert out.count("\n") == 0 and "Traceback" not in out, (argv, out)
        assert says in out, out
        if says == "cannot read":  # the role's credential, or first the TLS client key
            assert "permission denied" in out.lower(), out
