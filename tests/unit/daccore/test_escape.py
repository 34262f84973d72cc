import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daccore.escape import escape, printable

_TOKEN = re.compile(r"\\(\\|t|n|r|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})|(.)", re.S)


def _unescape(text: str) -> bytes:
    """The inverse of escape on bytes: what a person reading the line can recover."""
    out = bytearray()
    for m in _TOKEN.finditer(text):
        esc, plain = m.groups()
        if plain is not None:
            assert plain != "\\", f"lone backslash in {text!r}"
            out += plain.encode()
        elif esc in ("\\", "t", "n", "r"):
            out += {"\\": b"\\", "t": b"\t", "n": b"\n", "r": b"\r"}[esc]
        elif esc[0] == "x":
            out.append(int(esc[1:], 16))
        else:
            out += chr(int(esc[1:], 16)).encode()
    return bytes(out)


def _controls(text: str) -> list[str]:
    return [c for c in text if not c.isprintable()]


@pytest.mark.parametrize(
    "raw,shown",
    [
        (b"plain/name.txt", "plain/name.txt"),
        ("caf\u00e9/\u65e5\u672c".encode(), "caf\u00e9/\u65e5\u672c"),
        (b"bad\xff\xfe", "bad\\xff\\xfe"),
        (b"\x1b]0;pwned\x07\r", "\\x1b]0;pwned\\x07\\r"),
        (b"a\\b", "a\\\\b"),
        (b"nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("c1\u009b bidi\u202e ls\u2028".encode(), "c1\\u009b bidi\\u202e ls\\u2028"),
        (b"tab\tnl\n", "tab\\tnl\\n"),
    ],
)
def test_escape_writes_bytes_and_controls_like_ls_b(raw, shown):
    assert escape(raw) == shown
    assert _unescape(shown) == raw


def test_escape_of_a_surrogateescaped_str_equals_escape_of_its_bytes():
    raw = b"/src/\xff\x1b[2J"
    assert escape(raw.decode("utf-8", "surrogateescape")) == escape(raw) == "/src/\\xff\\x1b[2J"


def test_escape_keeps_what_it_is_told_to():
    assert escape("line1\nline2\x1b", keep="\n") == "line1\nline2\\x1b"


def test_printable_leaves_printable_text_alone_and_escapes_the_rest_once():
    once = printable("cannot read '/a\udcff'")
    assert once == "cannot read '/a\\xff'"
    assert printable(once) == once  # reading a record back does not escape it again
    assert printable("x\ny\x1b", keep="\n") == "x\ny\\x1b"
    assert printable("C:\\dir") == "C:\\dir"


@given(st.binary(max_size=200))
def test_every_byte_string_round_trips_through_one_printable_line(raw):
    shown = escape(raw)
    assert shown.isprintable()  # one line: no newline, no control, no surrogate
    assert _controls(shown) == []
    shown.encode("utf-8")  # strict: writable to JSON, a terminal, a pipe
    assert _unescape(shown) == raw


@given(st.text(max_size=200))
def test_no_control_character_survives_printable(text):
    shown = printable(text)
    assert _controls(shown) == []
    shown.encode("utf-8")
    assert printable(shown) == shown


@given(st.text(max_size=200))
def test_printable_with_newlines_kept_has_no_other_control(text):
    shown = printable(text, keep="\n")
    assert [c for c in _controls(shown) if c != "\n"] == []


def test_a_status_naming_a_non_utf8_path_serializes_and_reads_back_unchanged():
    from daccore.records.models import DETAIL_MAX, Status, StatusError

    name = b"/src/\xff\x1b]0;pwned\x07\r".decode("utf-8", "surrogateescape")
    s = Status(
        buffer="b1",
        host="h1",
        step=f"stage_in: {name}",
        error=StatusError(
            category="user", message=f"cannot read {name}", detail=f"task output\n{name}\n" * 2000
        ),
    )
    text = s.model_dump_json()  # today: PydanticSerializationError (surrogates)
    assert "\x1b" not in text and "\\\\x1b]0;pwned\\\\x07\\\\r" in text
    assert s.error is not None
    assert s.error.message == "cannot read /src/\\xff\\x1b]0;pwned\\x07\\r"
    assert s.step == "stage_in: /src/\\xff\\x1b]0;pwned\\x07\\r"
    assert len(s.error.detail) <= DETAIL_MAX and s.error.detail.endswith("\\r\n")
    assert Status.model_validate_json(text) == s
