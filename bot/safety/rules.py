"""The pure rules of moderation: normalising text, word lists, patterns, links, personal data and
prompt-injection phrases. No I/O, no clock: every rule is a function of the text and a compiled
list, table-tested in ``tests/test_safety_rules.py``.

Why normalise before matching: a word list that matches only the exact spelling is beaten by
``N1GG3R``, ``niiigger``, ``n i g g e r``, ``ｎｉｇｇｅｒ`` or a zero-width space. So text is folded
first (compatibility forms, accents and zero-width characters removed, case folded, spaced-out
letters joined) and matched as written, with in-word hyphens and dots removed, and with
leetspeak digits read as letters. A
stretched letter is handled by the word's own pattern: each run of one letter becomes
``letter{run,}``, so ``niiigger`` matches ``nigger`` while the country Niger (one ``g``) does not.
Words match whole (``class`` never matches a list entry ``ass``), with an optional plural ``s``
(not ``es``: ``spices`` is not a plural of a slur).

A ``Flag`` names the rule and the entry (``slurs.txt:12``, ``CHORUS_MODERATION_PATTERNS#2``,
``links=deny``), never the text: the audit trail keeps who, where and which rule, not what.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from bot.settings.safety import LinkPolicy


@dataclass(frozen=True)
class Flag:
    """Why a text was flagged: the rule (``slur``, ``word``, ``pattern``, ``link``,
    ``personal_data``, ``injection``, ``model``, ``canary``, ``system_leak``...) and which entry."""

    rule: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.rule}:{self.detail}" if self.detail else self.rule


# -- normalising ---------------------------------------------------------------------------------
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u034f\u180e\u200b\u200c\u200d\u2060\u2061\ufeff"))
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "@": "a", "$": "s"}
    | {"!": "i", "|": "l", "€": "e", "+": "t"}
)
_LEET_CHARS = re.compile(r"[0134578@$!|€+]")
# Single letters separated by one or two of " ._*-": "n i g g e r", "k.y.s" (not across lines).
_SPACED = re.compile(r"(?<!\w)(?:\w[ ._*\-]{1,2}){2,}\w(?!\w)")
_SEPARATORS = re.compile(r"[ ._*\-]+")


def normalise(text: str) -> str:
    """Text folded for matching: NFKC/accents/invisible characters removed (non-ASCII only),
    case folded, spaced-out letters joined. Line breaks are kept."""
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text.translate(_INVISIBLE))
        text = "".join(c for c in text if not unicodedata.combining(c))
        text = unicodedata.normalize("NFKC", text)
    text = text.casefold()
    if " " in text or "." in text or "-" in text or "*" in text or "_" in text:
        text = _SPACED.sub(lambda m: _SEPARATORS.sub("", m[0]), text)
    return text


_JOINERS = re.compile(r"(?<=\w)[-_.'*](?=\w)")


def variants(normalised: str) -> tuple[str, ...]:
    """The normalised text, then with in-word joiners removed (``towel-head``) and read as
    leetspeak, each only when it differs."""
    found = [normalised]
    joined = _JOINERS.sub("", normalised) if _JOINERS.search(normalised) else normalised
    if joined != normalised:
        found.append(joined)
    if _LEET_CHARS.search(joined):
        found.append(joined.translate(_LEET))
    return tuple(found)


# -- word lists ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One word or phrase of a list and where it came from (``slurs.txt:12``)."""

    rule: str
    text: str
    source: str


Token = tuple[str, int]  # (a character, its least run), or (" ", 0) for a gap between words


def _tokens(word: str) -> tuple[Token, ...]:
    return tuple(
        (" ", 0) if char.isspace() else (char, len(list(run)))
        for char, run in groupby(normalise(word))
    )


def _token_pattern(token: Token) -> str:
    char, count = token
    if char == " ":
        return r"[\W_]+"  # a space in a phrase stands for any run of non-word characters
    return re.escape(char) + ("+" if count == 1 else f"{{{count},}}")


def _word_pattern(word: str) -> str:
    """A list word as a pattern: runs of one letter may be stretched, spaces stand for any run of
    non-word characters."""
    return "".join(_token_pattern(t) for t in _tokens(word))


def _trie_pattern(words: Iterable[tuple[Token, ...]]) -> str:
    """One pattern for many words, their common prefixes shared (``n+i+g(?:g{2,}...|l...)``):
    the regex engine tries a handful of first letters per position, not every word."""
    trie: dict[Token, Any] = {}
    for tokens in words:
        node = trie
        for token in tokens:
            node = node.setdefault(token, {})
        node[("", 0)] = {}  # a word ends here

    def emit(node: dict[Token, Any]) -> str:
        ends = ("", 0) in node
        branches = [_token_pattern(t) + emit(sub) for t, sub in node.items() if t != ("", 0)]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        if ends:
            return f"(?:{body})?"
        return body

    return emit(trie)


class WordList:
    """Whole-word matching of many entries in one regular expression per pass.

    Each entry's own pattern, which only says *which* entry matched, is compiled on the first
    hit that needs it, not up front: a hit is rare, and compiling the default lists' 67 entry
    patterns was most of building a deployment's policies on the way to its first answer (and
    again for every scope that adds words)."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = tuple(e for e in entries if normalise(e.text).strip())
        self._each: list[re.Pattern[str] | None] = [None] * len(self.entries)
        forms = {_tokens(e.text) for e in self.entries}
        firsts = "".join(sorted({re.escape(f[0][0]) for f in forms if f}))
        self._any = (
            re.compile(rf"(?<!\w)(?=[{firsts}])(?:{_trie_pattern(sorted(forms))})s?(?!\w)")
            if forms
            else None
        )

    def __len__(self) -> int:
        return len(self.entries)

    def find(self, texts: Sequence[str]) -> Flag | None:
        """The first entry found in any of ``texts`` (normalised variants of one text)."""
        if self._any is None:
            return None
        for text in texts:
            found = self._any.search(text)
            if found is None:
                continue
            for index, entry in enumerate(self.entries):  # which one: only on a hit, rare
                if self._pattern(index).search(text):
                    return Flag(entry.rule, entry.source)
        return None

    def _pattern(self, index: int) -> re.Pattern[str]:
        pattern = self._each[index]
        if pattern is None:
            word = _word_pattern(self.entries[index].text)
            pattern = self._each[index] = re.compile(rf"(?<!\w){word}s?(?!\w)")
        return pattern


def parse_list(text: str, *, rule: str, source: str) -> tuple[list[Entry], list[tuple[str, str]]]:
    """A list file: one word or phrase per line, ``re:<pattern>`` for a regular expression,
    ``#`` comments. Returns (words, patterns as (source, pattern)); the caller compiles."""
    words: list[Entry] = []
    patterns: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        if line.startswith("re:"):
            patterns.append((where, line[3:].strip()))
        else:
            words.append(Entry(rule, line, where))
    return words, patterns


@dataclass(frozen=True)
class Pattern:
    source: str
    regex: re.Pattern[str]


def compile_pattern(source: str, pattern: str) -> Pattern:
    """Raise ``ValueError`` naming the source and pattern when it does not compile."""
    try:
        return Pattern(source, re.compile(pattern, re.IGNORECASE))
    except re.error as exc:
        raise ValueError(f"{source}: invalid regular expression {pattern!r}: {exc}") from None


def find_pattern(patterns: Sequence[Pattern], text: str) -> Flag | None:
    """Operators' regular expressions run on the text as written (case-insensitive)."""
    for pattern in patterns:
        if pattern.regex.search(text):
            return Flag("pattern", pattern.source)
    return None


# -- links ---------------------------------------------------------------------------------------
_TLDS = (
    "com|net|org|io|gg|tv|ly|me|co|app|dev|xyz|info|biz|ru|cn|de|uk|us|ca|fr|jp|br|in|eu|nl|"
    "link|site|online|shop|store|live|stream|to|be|cc|ai|sh|fm|vip|top|club|win|bet|pro|cloud"
)
_URL = re.compile(
    r"(?:https?://|www\.)[^\s<>\"'`)\]]+"
    rf"|(?<![\w@.-])(?:[a-z0-9](?:[a-z0-9-]{{0,61}}[a-z0-9])?\.)+(?:{_TLDS})(?![\w-])"
    r"(?:[/?#][^\s<>\"'`)\]]*)?",
    re.IGNORECASE,
)


def link_hosts(text: str) -> list[str]:
    """The host of every link in ``text``: ``https://...``, ``www....`` and bare domains."""
    hosts = []
    for found in _URL.finditer(text):
        rest = re.sub(r"^(?i:https?://)", "", found[0])
        host = re.split(r"[/?#:]", rest, maxsplit=1)[0].lower().rstrip(".")
        hosts.append(host.split("@")[-1])
    return hosts


def find_link(text: str, policy: LinkPolicy, domains: frozenset[str]) -> Flag | None:
    """A link the policy does not allow: every link (``deny``) or one off ``domains``."""
    if policy == "allow" or ("." not in text and "//" not in text):
        return None
    for host in link_hosts(text):
        if policy == "deny":
            return Flag("link", "links=deny")
        if not any(host == d or host.endswith("." + d) for d in domains):
            return Flag("link", "links=domains")
    return None


# -- personal data -------------------------------------------------------------------------------
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}(?!\w)", re.I)
_PHONE = re.compile(
    r"(?<![\w+.-])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){1,4}(?![\w.-])"
    r"|(?<![\w+])\+\d{8,14}(?!\w)"
)
_DATE = re.compile(r"^\d{4}[-./]\d{1,2}[-./]\d{1,2}|^\d{1,2}[-./]\d{1,2}[-./]\d{2,4}$")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_SSN = re.compile(r"(?<![\d-])\d{3}-\d{2}-\d{4}(?![\d-])")


def _luhn(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def find_personal_data(text: str) -> Flag | None:
    """An e-mail address, a phone number, a public IP address, a payment card (Luhn-checked)
    or a US social security number."""
    if "@" in text and _EMAIL.search(text):
        return Flag("personal_data", "email")
    if not any(c.isdigit() for c in text):
        return None
    for found in _CARD.finditer(text):
        digits = re.sub(r"\D", "", found[0])
        if 13 <= len(digits) <= 19 and _luhn(digits):
            return Flag("personal_data", "card")
    if _SSN.search(text):
        return Flag("personal_data", "ssn")
    for found in _PHONE.finditer(text):
        digits = re.sub(r"\D", "", found[0])
        if 9 <= len(digits) <= 15 and not _DATE.match(found[0].strip()):
            return Flag("personal_data", "phone")
    for found in _IPV4.finditer(text):
        try:
            address = ipaddress.IPv4Address(found[0])
        except ValueError:
            continue
        if address.is_global:
            return Flag("personal_data", "ip_address")
    return None


# -- prompt injection ----------------------------------------------------------------------------
_INSTRUCTIONS = r"(?:instructions?|prompts?|rules|directions|guidelines|programming|context)"
INJECTION: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.MULTILINE))
    for name, pattern in (
        (
            "ignore_instructions",
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|of\s+)*"
            r"(?:(?:your|the|my|these|those)\s+)?(?:previous|prior|above|earlier|preceding|"
            rf"initial|original|system|developer|all|your)\s+(?:\w+\s+)?{_INSTRUCTIONS}\b",
        ),
        ("reveal_prompt", r"\bsystem\s+prompt\b|\b(?:your|the)\s+system\s+instructions\b"),
        (
            "reveal_prompt",
            r"\b(?:reveal|print|repeat|output|recite|leak|dump|paste|verbatim)\b[^\n]{0,30}?"
            rf"\b(?:your|the)\s+(?:\w+\s+){{0,2}}?{_INSTRUCTIONS}\b",
        ),
        (
            "role_tags",
            r"</?\s*(?:system|assistant|user_message|tool_output|instructions?)\s*>"
            r"|<\|im_(?:start|end)\|>|\[/?(?:inst|sys)\]|^\s*#{2,}\s*(?:system|instructions?)\b",
        ),
        ("role_tags", r"^\s*(?:system|assistant)\s*:"),
        (
            "jailbreak",
            r"\b(?:dan\s+mode|do\s+anything\s+now)\b|\byou\s+are\s+now\s+(?:an?\s+)?"
            r"(?:unfiltered|uncensored|unrestricted|evil|dan)\b|\b(?:act|pretend|roleplay)\s+"
            r"(?:as|to\s+be|like)\s+(?:an?\s+)?(?:unfiltered|uncensored|unrestricted)\b",
        ),
        ("forged_speaker", r"\n\s*[-*\u2022]\s*@?[\w .]{1,32}:"),
    )
)


_INJECTION_ANY = re.compile(
    "|".join(f"(?P<g{n}>{pattern.pattern})" for n, (_, pattern) in enumerate(INJECTION)),
    re.MULTILINE,
)


def find_injection(normalised: str) -> Flag | None:
    """A phrase of a prompt-injection attempt. The structural defences (data blocks, escaping,
    the canary) hold whether or not this fires; this is for the audit trail and the presets
    that refuse such messages. (One search over every pattern at once.)"""
    found = _INJECTION_ANY.search(normalised)
    if found is None or found.lastgroup is None:
        return None
    return Flag("injection", INJECTION[int(found.lastgroup[1:])][0])
