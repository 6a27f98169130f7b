"""Reasoning control: a cheap rule that decides per message how hard the model should think.

Extended thinking (Anthropic) or a higher reasoning effort (OpenAI, Gemini) makes hard answers
better and every answer slower and dearer. Most chat lines ("hi", "thanks!", "what time is it in
Lisbon?") need none, so a few cheap signals of the message decide, with no model call:

- signals of a hard task: asks to prove, derive, debug, plan, compare or explain why; contains
  code or a traceback; contains arithmetic or several numbers to combine; has several questions;
  is long;
- signals of chit-chat: short greetings, thanks, reactions.

Each signal adds points; the total maps to off / low / medium, capped by ``max_level``
(``CHORUS_REASONING``: ``auto`` uses the rule, ``off`` disables it, ``low``/``medium``/``high``
force that level for every message).
"""

from __future__ import annotations

import re
from typing import Literal

Level = Literal["off", "low", "medium", "high"]
LEVELS: tuple[Level, ...] = ("off", "low", "medium", "high")

_HARD_WORDS = re.compile(
    r"\b(prove|proof|derive|derivation|debug|traceback|stack ?trace|refactor|optimi[sz]e|"
    r"algorithm|complexity|step[- ]by[- ]step|trade-?offs?|compare|comparison|pros and cons|"
    r"why (?:does|do|is|are|did|would)|explain why|plan|design|architecture|calculate|"
    r"solve|equation|integral|probability|analy[sz]e|estimate)\b",
    re.IGNORECASE,
)
_SMALL_TALK = re.compile(
    r"^\s*(hi|hello|hey|yo|thanks?( you)?|thx|ty|ok(ay)?|cool|nice|lol|lmao|gg|good (morning|"
    r"night|evening)|bye|cya|\W+)\s*[!.?]*\s*$",
    re.IGNORECASE,
)
_CODE = re.compile(r"```|^\s{4,}\S|Traceback \(most recent call last\)|\bdef \w+\(", re.MULTILINE)
_CODE_LINE_END = re.compile(r"[{};]\s*$", re.MULTILINE)
_MATH = re.compile(r"\d\s*[-+*/^%=]\s*\d|[∑∫√≈≤≥]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def score(text: str) -> int:
    """Points of difficulty of one message; 0 for chit-chat."""
    if _SMALL_TALK.match(text):
        return 0
    points = 0
    points += 2 * min(len(_HARD_WORDS.findall(text)), 2)
    if _CODE.search(text) or len(_CODE_LINE_END.findall(text)) >= 2:
        points += 2
    if _MATH.search(text) or len(_NUMBER.findall(text)) >= 4:
        points += 1
    if text.count("?") >= 3:
        points += 1
    if len(text) >= 600:
        points += 1
    if len(text) >= 2000:
        points += 1
    return points


def decide(text: str, mode: str = "auto", max_level: Level = "medium") -> Level:
    """The reasoning level for a message under ``mode`` (auto, off, low, medium, high)."""
    if mode in ("off", "low", "medium", "high"):
        return mode  # type: ignore[return-value]
    points = score(text)
    level: Level = "off" if points < 2 else "low" if points < 4 else "medium"
    return LEVELS[min(LEVELS.index(level), LEVELS.index(max_level))]
