"""`munge.well_formed`: the user service's look at a line before it costs an unmunge (issue
45). What munged makes passes; what it could not have made is refused without munged."""

import base64
import os

import pytest

from daccore.services.munge import well_formed


def armoured(raw: bytes) -> bytes:
    return b"MUNGE:" + base64.b64encode(raw) + b":"


#: the start of what munged 0.5 writes here: version 3, AES-128, SHA-256, no zip, no realm
HEADER = bytes([3, 4, 5, 0, 0])


def test_what_munged_makes_is_well_formed():
    # the sizes of an empty payload's credential and of a request's, as munged made them here
    for size in (101, 117, 149, 3109):
        assert well_formed(armoured(HEADER + os.urandom(size - len(HEADER))))
    # no cipher, MD5 and a compressed payload: the smallest munged could make
    assert well_formed(armoured(bytes([3, 0, 2, 3, 0]) + os.urandom(17)))


@pytest.mark.parametrize(
    "line",
    [
        b"MUNGE:garbage:",
        b"MUNGE:xyz:",
        b"MUNGE::",
        b"MUNGE:",
        b"hello",
        armoured(HEADER + os.urandom(96))[:-1],  # no suffix
        armoured(HEADER + os.urandom(96)).replace(b"MUNGE:", b"munge:"),
        armoured(bytes([2]) + os.urandom(100)),  # another credential version
        armoured(HEADER + os.urandom(10)),  # shorter than any credential
        b"MUNGE:" + base64.b64encode(HEADER + os.urandom(96)).rstrip(b"=") + b":",  # unpadded
        b"MUNGE:" + base64.b64encode(HEADER + os.urandom(96))[:40] + b" \x1b[2J" + b":",
        b"MUNGE:" + base64.b64encode(HEADER + os.urandom(96)) + b"\x00:",
    ],
)
def test_what_munged_could_not_have_made_is_not(line):
    assert not well_formed(line)
