"""Which servers a stage is split across, by the backend's rule (issue 35): a local buffer's
servers must share the primary's mount namespace, a lustre buffer's mount its client (every
server, by create.yml), a daos buffer's never split; and the proof a server finds before it
copies a share."""

import os

import pytest

from dacd.staging.reach import PROOF_PREFIX, drop_proof, make_proof, proves, reaches, split_reach

HERE = "boot-a:mnt:[4026531841]"


def test_a_local_buffer_reaches_only_the_same_mount_namespace_of_the_same_boot():
    assert reaches(HERE, HERE, "namespace")
    assert not reaches(HERE, "boot-a:mnt:[4026532000]", "namespace")
    assert not reaches(HERE, "boot-b:mnt:[4026531841]", "namespace")
    assert not reaches(HERE, None, "namespace")


def test_a_lustre_buffer_reaches_every_server_whose_dacd_splits_on_any_kernel():
    assert reaches(HERE, "boot-a:mnt:[4026532000]", "client")  # another host of the site
    assert reaches(HERE, "boot-b:mnt:[4026531841]", "client")  # another machine
    assert not reaches(HERE, None, "client")  # a dacd that said no view


def test_none_reaches_nothing():
    assert not reaches(HERE, HERE, "none")


def test_each_backend_says_its_rule():
    from daccore.backends import _registry

    rules = [split_reach(_registry()[name]) for name in ("local", "lustre", "daos")]
    assert rules == ["namespace", "client", "none"]


def test_a_proof_is_found_where_it_was_made_and_nowhere_else(tmp_path):
    primary, empty = tmp_path / "fs", tmp_path / "other"
    primary.mkdir()
    empty.mkdir()
    proof = make_proof(str(primary))
    made = primary / (PROOF_PREFIX + proof)
    assert len(proof) == 32 and made.is_file() and made.stat().st_mode & 0o777 == 0o600
    assert proves(str(primary), proof)
    assert not proves(str(empty), proof)  # a mount point with nothing mounted on it
    assert not proves(str(tmp_path / "missing"), proof)
    assert not proves(str(primary), make_proof(str(empty)))  # another plan's
    drop_proof(str(primary), proof)
    assert not made.exists() and not proves(str(primary), proof)
    drop_proof(str(primary), proof)  # gone already: nothing to do
    assert proves(str(empty), "")  # a plan recorded before proofs


def test_a_link_or_a_users_file_is_no_proof(tmp_path, monkeypatch):
    primary, elsewhere = tmp_path / "fs", tmp_path / "elsewhere"
    primary.mkdir()
    elsewhere.mkdir()
    proof = make_proof(str(elsewhere))
    (primary / (PROOF_PREFIX + proof)).symlink_to(elsewhere / (PROOF_PREFIX + proof))
    assert not proves(str(primary), proof)  # a link, even to the real one
    os.unlink(primary / (PROOF_PREFIX + proof))
    users = primary / (PROOF_PREFIX + proof)
    users.write_bytes(b"")
    os.chown(users, 1000, 1000)
    assert not proves(str(primary), proof)  # not root's
    monkeypatch.setattr("dacd.staging.reach.secrets.token_hex", lambda n: proof)
    with pytest.raises(FileExistsError):  # a name already there is never reused
        make_proof(str(primary))
