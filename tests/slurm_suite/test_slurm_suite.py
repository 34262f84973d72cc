"""Slurm's own burst-buffer tests (testsuite/expect/test35.*, test17.45 and the python
datawarp test), fetched from Debian's source package of each release, run against the local
DAC: every one under burst_buffer/datawarp, their lua-applicable ones under burst_buffer/lua,
on 22.05, 24.11 and 26.05 (which runs 24.11's tests). The edits made to them are
tests/slurm_testsuite.py's EDITS; the results are docs/slurm.md's conformance table.

A case passes when Slurm's test passes (exit 0, Slurm's own SUCCESS); a check dac does not meet
is asserted to fail as docs/slurm.md says, so a change either way is seen.
"""

import re

import pytest
import slurm_testsuite

from daclocal.releases import RELEASES

#: Slurm's tests that need Cray's persistent-buffer jobs (#BB create_persistent), which
#: burst_buffer/lua does not offer, or Cray's dwstat, which `scontrol show dwstat` runs only
#: under burst_buffer/datawarp
LUA_CASES = ("test17.45", "test35.2", "test35.3", "test35.6")

#: (test, plugin, release of the tests) -> what Slurm's test fails with where it is not met
#: (why: docs/slurm.md, "Slurm's own tests"); every one is met today
NOT_MET: dict[tuple[str, str, str], str] = {}


def _check(dac, name: str, rc: int, out: str) -> None:
    plugin, logs = dac.plugin, dac.log_tail()
    why = NOT_MET.get((name, plugin, slurm_testsuite.tests_release(dac.release)))
    if why is None:
        assert rc == 0 and re.search(r"SUCCESS|passed", out), (
            f"{name} under {plugin}: exit {rc}\n{out[-6000:]}\n{logs}"
        )
    else:
        assert rc == 1 and why in out, (
            f"{name} under {plugin} was expected to fail with {why!r}: exit {rc}\n{out[-6000:]}"
        )


def _cases():
    """(release, plugin, test), grouped by release x plugin (one local DAC each)."""
    for plugin in ("datawarp", "lua"):
        for release in RELEASES:
            names = (*slurm_testsuite.EXPECT_TESTS, "python") if plugin == "datawarp" else LUA_CASES
            for name in names:
                yield pytest.param(release, plugin, name, id=f"{release}-{plugin}-{name}")


@pytest.mark.parametrize("release,plugin,name", list(_cases()))
def test_slurm_test(dacs, release, plugin, name):
    dac = dacs.get(release, plugin)
    if name == "python":
        rc, out = dac.python()
        _check(dac, name, rc, out)
        assert re.search(r"\b2 (passed|failed)\b", out), out[-4000:]  # both of its tests ran
    else:
        rc, out = dac.expect(name)
        _check(dac, name, rc, out)
