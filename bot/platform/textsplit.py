"""Split a long answer into platform-sized pieces without breaking what a reader relies on.

Every platform has a length limit (Discord 2,000 characters, Slack about 4,000 per message,
Twitch 500, YouTube 200). A naive cut lands inside a word, a link or a code block and leaves an
unclosed fence that turns the rest of the chat into code. So pieces end, in order of
preference, at a paragraph break, a line break, a sentence end, or a space; a code block that
must be split is closed at the end of one piece with its own marker (a ``~~~`` block with
``~~~``, a four-backtick block with four) and re-opened (same language tag) at the start of the
next, so every piece is valid on its own. As in CommonMark, only a bare line of the opening's
character, at least as long, closes a block: a ```` ``` ```` line inside a ``~~~`` block is
code. Only a single word longer than the limit is ever cut mid-word.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
_SENTENCE_END = re.compile(r"[.!?…](?:[\"')\]]*)\s")


def split_text(text: str, limit: int) -> list[str]:
    """Pieces of ``text``, each at most ``limit`` characters, code fences balanced in each."""
    if limit < 20:
        raise ValueError("limit must be at least 20 characters")
    text = text.strip()
    if not text:
        return []
    pieces: list[str] = []
    rest = text
    fence: str | None = None  # the opening line of a code block that continues into `rest`
    while rest:
        prefix = f"{fence}\n" if fence else ""
        budget = limit - len(prefix)
        if len(rest) <= budget and _open_fence(rest, fence) is None:
            pieces.append(prefix + rest)
            break
        # Reserve room to close a code block this piece may leave open.
        cut = _best_cut(rest, budget - 1 - _longest_marker(rest[:budget], fence))
        chunk = rest[:cut].rstrip()
        still_open = _open_fence(chunk, fence)
        closing = f"\n{_marker(still_open)}" if still_open else ""
        piece = (prefix + chunk + closing).strip("\n")
        if piece.strip():
            pieces.append(piece)
        fence = still_open
        rest = rest[cut:].lstrip("\n" if fence else " \n")
    return pieces


def _best_cut(text: str, budget: int) -> int:
    """Where to end a piece of at most ``budget`` characters of ``text``."""
    if len(text) <= budget:
        return len(text)
    window = text[: budget + 1]
    floor = budget // 3  # never make a piece tiny just to hit a nicer boundary
    for pattern in ("\n\n", "\n"):
        at = window.rfind(pattern, floor)
        if at > 0:
            return at + len(pattern)
    sentences = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() > floor]
    if sentences:
        return sentences[-1]
    at = window.rfind(" ", floor)
    if at > 0:
        return at + 1
    return budget


def _open_fence(chunk: str, fence: str | None) -> str | None:
    """The fence line of a code block left open at the end of ``chunk`` (None if balanced).

    ``fence`` is the block already open when the chunk starts (re-opened by the caller).
    """
    current = fence
    for line in chunk.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        if current is None:
            current = line.strip()  # opens a block
        elif _closes(match, _marker(current)):
            current = None
    return current


def _marker(fence_line: str) -> str:
    """The run of backticks or tildes that opened a block (```` ``` ````, ``~~~``, ...)."""
    match = _FENCE.match(fence_line)
    return match.group(2) if match else "```"


def _closes(match: re.Match[str], opening: str) -> bool:
    marker, info = match.group(2), match.group(3)
    return marker[0] == opening[0] and len(marker) >= len(opening) and not info.strip()


def _longest_marker(text: str, fence: str | None) -> int:
    """Room to keep for a closing marker: the longest fence a piece of ``text`` may leave open."""
    longest = len(_marker(fence)) if fence else 3
    for line in text.split("\n"):
        if match := _FENCE.match(line):
            longest = max(longest, len(match.group(2)))
    return longest
