"""A custom command's text and options: ``{variables}`` filled in, ``-cd=30`` options read.

``expand`` fills the variables of a command's text; only those present are computed, so
``{count}`` increments its counter only in a command that shows it. The values come from the
caller (``Variables``), which keeps this module pure and table-tested:

``{user}`` the caller's display name; ``{touser}`` the first argument (without a leading ``@``)
or the caller; ``{count}`` the command's counter after this use; ``{uptime}`` how long the
stream has been live, or the offline text; ``{random.A-B}`` a whole number from A to B;
``{channel}`` the channel's name. Anything else in braces stays as written.

``parse_definition`` reads what follows ``!addcom``/``!editcom``: options first or right after
the name (``-cd=SECONDS`` the command's cooldown, ``-ucd=SECONDS`` per user, ``-ul=ROLE`` who
may use it, ``-a=ALIAS,ALIAS``), then the name (with or without the prefix), then the text.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

VARIABLE = re.compile(r"\{(user|touser|count|uptime|channel|random\.(-?\d{1,9})-(-?\d{1,9}))\}")
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
ROLES = ("everyone", "subscriber", "moderator")
RoleName = Literal["everyone", "subscriber", "moderator"]
MAX_COOLDOWN = 86_400.0
_OPTION = re.compile(r"-(cd|ucd|ul|a)=(\S*)")
_LOOKS_OPTION = re.compile(r"-[a-z]+=")
_ROLE: dict[str, RoleName] = {"everyone": "everyone", "subscriber": "subscriber"}
_ROLE["moderator"] = "moderator"


@dataclass(frozen=True)
class Variables:
    """What a use of a command knows: the caller, the arguments, and how to get the rest."""

    user: str
    args: str
    channel: str
    count: Callable[[], Awaitable[int]]
    uptime: Callable[[], Awaitable[str]]


async def expand(text: str, values: Variables) -> str:
    """``text`` with every known variable filled in (each computed at most once)."""
    found = {match.group(0): match for match in VARIABLE.finditer(text)}
    if not found:
        return text
    filled: dict[str, str] = {}
    for token, match in found.items():
        name = match.group(1)
        if name == "user":
            filled[token] = values.user
        elif name == "touser":
            first = values.args.split()[0] if values.args.split() else ""
            filled[token] = first.lstrip("@") or values.user
        elif name == "count":
            filled[token] = str(await values.count())
        elif name == "uptime":
            filled[token] = await values.uptime()
        elif name == "channel":
            filled[token] = values.channel
        else:
            low, high = sorted((int(match.group(2)), int(match.group(3))))
            filled[token] = str(low + secrets.randbelow(high - low + 1))
    return VARIABLE.sub(lambda m: filled[m.group(0)], text)


@dataclass
class Definition:
    """What ``!addcom``/``!editcom`` said: the name, the text (None: unchanged), the options."""

    name: str
    text: str | None
    cooldown: float | None = None
    user_cooldown: float | None = None
    role: RoleName | None = None
    aliases: list[str] | None = None
    options: set[str] = field(default_factory=set)


class BadOption(ValueError):
    """An option that is not one of ``-cd``, ``-ucd``, ``-ul``, ``-a``, or a bad value."""

    def __init__(self, option: str) -> None:
        super().__init__(option)
        self.option = option


def parse_definition(args: str, prefix: str) -> Definition | None:
    """``[options] NAME [options] TEXT`` -> a ``Definition`` (None: no name given).
    Raises ``BadOption`` for an option it cannot read."""
    words = args.split(" ")
    options: list[str] = []
    name: str | None = None
    rest: list[str] = []
    for index, word in enumerate(words):
        if not word:
            continue
        if _LOOKS_OPTION.match(word):
            options.append(word)
            continue
        if name is None:
            name = word.removeprefix(prefix).lower()
            continue
        rest = words[index:]
        break
    if name is None:
        return None
    text = " ".join(rest).strip()
    definition = Definition(name=name, text=text or None)
    for option in options:
        _apply(definition, option, prefix)
    return definition


def _apply(definition: Definition, option: str, prefix: str) -> None:
    match = _OPTION.fullmatch(option)
    if match is None:
        raise BadOption(option)
    key, value = match.groups()
    definition.options.add(key)
    if key in ("cd", "ucd"):
        try:
            seconds = float(value)
        except ValueError:
            raise BadOption(option) from None
        if not 0 <= seconds <= MAX_COOLDOWN:
            raise BadOption(option)
        if key == "cd":
            definition.cooldown = seconds
        else:
            definition.user_cooldown = seconds
    elif key == "ul":
        role = _ROLE.get(value.lower())
        if role is None:
            raise BadOption(option)
        definition.role = role
    else:
        aliases = [a.strip().lower().removeprefix(prefix) for a in value.split(",") if a.strip()]
        if not all(NAME.fullmatch(a) for a in aliases):
            raise BadOption(option)
        definition.aliases = aliases
