"""The console adapter's line reading: caps, endings and decoding, without a terminal."""

from __future__ import annotations

import io

from adapters.console import decode_line, one_line, read_line


def test_lines_are_read_without_their_endings() -> None:
    stream = io.BytesIO(b"one\r\ntwo\nthree")
    assert read_line(stream) == (b"one", False)
    assert read_line(stream) == (b"two", False)
    assert read_line(stream) == (b"three", False)
    assert read_line(stream) is None


def test_an_over_long_line_is_cut_and_the_rest_discarded() -> None:
    stream = io.BytesIO(b"x" * 50 + b"\nnext\n")
    line, cut = read_line(stream, cap=10)  # type: ignore[misc]
    assert cut and line == b"x" * 10
    assert read_line(stream, cap=10) == (b"next", False)


def test_a_line_exactly_at_the_cap_is_whole() -> None:
    stream = io.BytesIO(b"y" * 10 + b"\n")
    assert read_line(stream, cap=10) == (b"y" * 10, False)


def test_invalid_utf8_names_the_line_and_byte() -> None:
    text, notice = decode_line(b"ab\xffcd", 3)
    assert text is None
    assert notice == "line 3 is not valid UTF-8 (byte 0xff at position 2); skipped"


def test_blank_lines_are_not_messages() -> None:
    assert decode_line(b"   ", 2) == (None, "line 2 is empty; nothing to answer")
    assert decode_line("héllo".encode(), 1) == ("héllo", None)


def test_fd_reader_splits_lines_and_honours_the_cap() -> None:
    import os

    from adapters.console import FdLineReader

    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"first\r\n" + b"z" * 30 + b"\nlast-no-newline")
    os.close(write_fd)
    reader = FdLineReader(read_fd)
    try:
        assert read_line(reader, cap=10) == (b"first", False)
        assert read_line(reader, cap=10) == (b"z" * 10, True)
        assert read_line(reader, cap=10) == (b"last-no-newline"[:10], True)
        assert read_line(reader, cap=10) is None
    finally:
        os.close(read_fd)


def test_one_line_escapes_what_would_break_the_line_and_printf_b_reads_it_back() -> None:
    text = "a\\b\r\nc\nd"
    line = one_line(text)
    assert "\n" not in line and "\r" not in line
    assert line == "a\\\\b\\r\\nc\\nd"
    assert line.encode().decode("unicode_escape") == text
