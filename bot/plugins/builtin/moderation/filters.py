"""The spam filters of the ``moderation`` plugin: pure, cheap checks of one line's text.

Each filter looks at the text alone and answers whether it fires: capital letters past a ratio
(over a minimum number of letters), symbols past a ratio, an emote flood, zalgo (stacked
combining marks) and links. The two that need memory (the same user repeating a line, the same
line from many users: copypasta) are decided by the plugin with atomic counters in its store;
this module gives them the line's ``fingerprint``. Every check is one pass over the text, so
all of them together cost a few microseconds a line (BENCHMARKS.md, ``make bench``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

# A link as people write one in chat: a scheme, www., or a bare domain with a common TLD.
_TLDS = (
    "com|net|org|io|gg|tv|ly|me|co|app|dev|xyz|info|biz|ru|cn|de|uk|us|ca|fr|jp|br|in|eu|nl|"
    "link|site|online|shop|store|live|stream|to|be|cc|ai|sh|fm|vip|top|club|win|bet|pro|cloud"
)
_URL = re.compile(
    r"(?:https?://|www\.)[^\s<>\"'`)\]]+"
    rf"|(?<![\w@.-])(?:[a-z0-9](?:[a-z0-9-]{{0,61}}[a-z0-9])?\.)+(?:{_TLDS})(?![\w-])",
    re.IGNORECASE,
)
TextRule = Literal["links", "zalgo", "caps", "emotes", "symbols"]
_SHORTCODE = re.compile(r":[A-Za-z0-9_+-]{2,32}:")  # :emote: on Discord, YouTube, Slack
_SPACE = re.compile(r"\s+")
# Twitch's best-known emotes: typed as words, shown as pictures.
DEFAULT_EMOTES = (
    "Kappa", "PogChamp", "LUL", "Kreygasm", "BibleThump", "ResidentSleeper", "4Head",
    "SeemsGood", "NotLikeThis", "TriHard", "KEKW", "OMEGALUL", "PogU", "monkaS", "PepeHands",
    "Jebaited", "CoolStoryBob", "HeyGuys", "VoHiYo", "DansGame", "SwiftRage", "WutFace",
)  # fmt: skip


def is_emoji(char: str) -> bool:
    """A pictograph (the emoji blocks and the older dingbats and symbols)."""
    point = ord(char)
    return 0x1F000 <= point <= 0x1FAFF or 0x2600 <= point <= 0x27BF


@dataclass(frozen=True)
class Thresholds:
    """When each text filter fires (from the plugin's settings)."""

    caps_ratio: float = 0.7
    caps_min_letters: int = 12
    symbol_ratio: float = 0.5
    symbol_min_chars: int = 12
    emote_max: int = 8
    zalgo_marks: int = 3
    emote_names: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_EMOTES))


def caps(text: str, ratio: float, min_letters: int) -> bool:
    """At least ``min_letters`` letters, and capitals at least ``ratio`` of them."""
    if len(text) < min_letters:
        return False
    upper = sum(map(str.isupper, text))
    if upper < ratio * min_letters:  # most chat: too few capitals to be shouting at all
        return False
    letters = sum(map(str.isalpha, text))
    return letters >= min_letters and upper >= ratio * letters


def symbols(text: str, ratio: float, min_chars: int) -> bool:
    """At least ``min_chars`` visible characters, and symbols (neither letters, digits nor
    emoji) at least ``ratio`` of them."""
    if len(text) < min_chars:
        return False
    plain = sum(map(str.isalnum, text)) + sum(map(str.isspace, text))
    if len(text) - plain < ratio * min_chars:  # too few candidates to be symbol spam
        return False
    visible = odd = 0
    for char in text:
        if char.isspace():
            continue
        visible += 1
        if not char.isalnum() and not is_emoji(char) and not unicodedata.combining(char):
            odd += 1
    return visible >= min_chars and odd >= ratio * visible


def emote_count(text: str, names: Iterable[str] | frozenset[str]) -> int:
    """Emoji, ``:shortcodes:`` and known emote words in ``text``."""
    known = names if isinstance(names, frozenset) else frozenset(names)
    count = 0 if text.isascii() else sum(1 for char in text if is_emoji(char))
    if ":" in text:
        count += len(_SHORTCODE.findall(text))
    if known:
        count += sum(1 for word in text.split() if word in known)
    return count


def zalgo(text: str, marks: int) -> bool:
    """``marks`` or more combining marks stacked on one character (one or two are ordinary
    writing: accents, Vietnamese, Devanagari)."""
    if text.isascii():
        return False
    run = 0
    for char in text:
        if unicodedata.combining(char):
            run += 1
            if run >= marks:
                return True
        else:
            run = 0
    return False


def has_link(text: str) -> bool:
    """A link in ``text`` (a scheme, ``www.`` or a bare domain)."""
    if "." not in text and "//" not in text:
        return False
    return _URL.search(text) is not None


def fingerprint(text: str) -> str:
    """The line as repeats and copypasta compare it (case and spacing ignored), hashed."""
    normal = _SPACE.sub(" ", text.casefold()).strip()
    return hashlib.blake2b(normal.encode("utf-8"), digest_size=8).hexdigest()


def text_filter(text: str, enabled: frozenset[str], limits: Thresholds) -> TextRule | None:
    """The first text-only filter of ``enabled`` that ``text`` trips (its name), or None."""
    if "links" in enabled and has_link(text):
        return "links"
    if "zalgo" in enabled and zalgo(text, limits.zalgo_marks):
        return "zalgo"
    if "caps" in enabled and caps(text, limits.caps_ratio, limits.caps_min_letters):
        return "caps"
    if "emotes" in enabled and emote_count(text, limits.emote_names) > limits.emote_max:
        return "emotes"
    if "symbols" in enabled and symbols(text, limits.symbol_ratio, limits.symbol_min_chars):
        return "symbols"
    return None
