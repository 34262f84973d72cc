"""`scontrol show bbstat` under burst_buffer/lua (real Slurm 22.05), asked by an unprivileged
user about another user's buffer: 22.05 does not say who asks, so only the public line, never
the paths or error text of the buffer's owner (docs/security.md, "Attacks tried")."""

import pytest
from security.entry_helpers import ALICE, MALLORY, SECRET, Cluster, victim_file


@pytest.fixture(scope="module")
def lua():
    cluster = Cluster("lua")
    try:
        yield cluster
    finally:
        cluster.close()


def test_entry_lua_bbstat_of_another_users_buffer_shows_only_the_public_line(lua, tmp_path):
    root_line = lua.failed_buffer(tmp_path, 990012)
    for user in (ALICE, MALLORY):  # 22.05: not even the owner can be told apart
        # "0 0 <job>": on 22.05 these are the user's words, not a uid and gid Slurm passed
        for words in (["990012"], ["0", "0", "990012"], ["5678", "8765", "990012"]):
            out = lua.bbstat(user, *words).stdout
            assert SECRET not in out, (user, words, out)
        out = lua.bbstat(user, "990012").stdout.strip()
        assert (
            out
            == root_line.strip().split(", failed: ")[0]
            + ", failed (its owner sees why with dacctl status)"
        ), out


def test_entry_lua_bbstat_reaches_nothing_but_the_status(lua):
    victim = victim_file("dac-entry-lua-pathfile")
    for words in (
        ["--function", "paths", "--token", "1", "--pathfile", str(victim)],
        ["drain", "dac-server-1"],
        ["local", "down", "--workdir", "/tmp"],
        ["status", "990012", "--line"],
    ):
        out = lua.as_user(ALICE, "scontrol", "--", "show", "bbstat", *words).stdout
        assert out.startswith("dac-bbstat: usage: scontrol show bbstat [job id |"), (words, out)
    assert victim.read_text() == "root's own data\n"
    assert lua.drained() == []
    assert "pool units quantity" in lua.bbstat(ALICE).stdout
