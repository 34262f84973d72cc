"""The staging tests run twice: with today's single copier, and with every stage split across
three in-process servers (DAC_STAGE_SPLIT=3 in dacd's environment: the reconciler then stages
with dacd/staging/split.py's split_here, issue 35's split copy with every share on this host).
A module opts in with

    from split_staging import stage_split  # noqa: F401  (an autouse fixture)

and wraps each expected stage failure in `stage_line`: a share's failure names its server."""

import re

import pytest

SHARES = 3


@pytest.fixture(autouse=True, params=[0, SHARES], ids=["one-copier", f"split{SHARES}"])
def stage_split(request, monkeypatch):
    """Autouse, so it runs before the DAC fixture starts dacd, which inherits the variable."""
    if request.param:
        monkeypatch.setenv("DAC_STAGE_SPLIT", str(request.param))
    else:
        monkeypatch.delenv("DAC_STAGE_SPLIT", raising=False)
    return request.param


class stage_line(str):  # noqa: N801 - used where a str literal was
    """An expected `stage_in failed: …` line that also equals the split copy's `stage_in
    failed on share<i>: …` (the failure is found by whichever share holds the path)."""

    def __eq__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        return str.__eq__(self, other) or str.__eq__(
            re.sub(r"(stage_(?:in|out) failed) on share\d+:", r"\1:", other), str(self)
        )

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = str.__hash__
