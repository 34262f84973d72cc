"""The credential file and the hooks' token cache, on a real file system (no etcd)."""

import os

import pytest

from daccore.errors import NoCredential
from daccore.etcd.auth import Credential, token_rejected


@pytest.fixture
def cred(tmp_path, monkeypatch):
    monkeypatch.setenv("DAC_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "slurm"
    path.write_text("slurm:pa:ss\n")
    path.chmod(0o600)
    return Credential(str(path), "slurm", cache=True)


def test_the_file_is_user_colon_password_and_anything_else_is_one_line(cred, tmp_path):
    assert cred.secret() == ("slurm", "pa:ss")  # the password may hold colons
    for bad in ("slurm\n", ":pw\n", "slurm:\n", ""):
        (tmp_path / "slurm").write_text(bad)
        with pytest.raises(NoCredential, match="not one line <user>:<password>") as e:
            cred.secret()
        assert "\n" not in str(e.value) and str(tmp_path / "slurm") in str(e.value)
    with pytest.raises(NoCredential, match=r"\(no such file or directory\).*SlurmUser"):
        Credential(str(tmp_path / "absent"), "slurm").secret()


def test_a_cached_token_is_served_only_from_a_private_file_of_the_caller(cred, tmp_path):
    cred._write_cache("https://e1", "tok1")
    cred._write_cache("https://e2", "tok2")
    assert cred._read_cache() == {"https://e1": "tok1", "https://e2": "tok2"}
    (cache,) = (tmp_path / "cache").iterdir()
    assert cache.stat().st_mode & 0o777 == 0o600
    cache.chmod(0o640)
    assert cred._read_cache() == {}  # group-readable: someone else may hold the token
    cache.chmod(0o600)
    os.chown(cache, 1234, 4321)
    assert cred._read_cache() == {}  # not the caller's: could have been planted
    os.chown(cache, 0, 0)
    link = tmp_path / "elsewhere.json"
    cache.rename(link)
    cache.symlink_to(link)
    assert cred._read_cache() == {}  # never through a link
    cache.unlink()
    link.rename(cache)
    assert cred._read_cache()["https://e1"] == "tok1"
    cred._write_cache("https://e3", "tok3\r\nX-Injected: 1")
    assert "https://e3" not in cred._read_cache()  # never a line break into a header
    (tmp_path / "slurm").write_text("slurm:new-password\n")  # the credential was replaced
    assert cred._read_cache() == {}


def test_what_counts_as_a_rejected_token():
    assert token_rejected(16, "etcdserver: invalid auth token")
    assert token_rejected(
        None, "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"
    )
    assert token_rejected(3, "etcdserver: revision of auth store is old")
    assert not token_rejected(7, "etcdserver: permission denied")
    assert not token_rejected(3, "etcdserver: user name is empty")


@pytest.mark.parametrize(
    "reason",
    ["context deadline exceeded", "etcdserver: request timed out", "etcdserver: no leader"],
)
def test_a_login_etcd_cannot_serve_now_is_etcd_out_of_reach_not_a_refusal(cred, reason):
    """A member without quorum times the login out: the client fails over and backs off
    (StoreUnavailable in the end), it does not tell an admin to fix the credential file."""
    from daccore.etcd.types import EtcdRequestError, Unreachable

    def login(user, password):
        raise EtcdRequestError("authenticate", 2, reason)

    with pytest.raises(Unreachable):
        cred.call("https://127.0.0.1:2379", login, lambda token: token)


def test_a_wrong_password_is_an_admins_one_line(cred):
    from daccore.errors import AdminError
    from daccore.etcd.types import EtcdRequestError

    def login(user, password):
        raise EtcdRequestError(
            "authenticate", 3, "etcdserver: authentication failed, invalid user ID or password"
        )

    with pytest.raises(AdminError, match="refused user 'slurm'"):
        cred.call("https://127.0.0.1:2379", login, lambda token: token)
