"""What one conversation's safety rules are: the presets, the compiled lists, the quota limits,
and ``safety_for(conversation)``, the ONE place that decides which apply where.

Why one function: moderation and quota settings are per scope. Today a scope is "the preset's
platforms" (``CHORUS_SAFETY_PRESET=streamer`` applies to ``CHORUS_SAFETY_PRESET_PLATFORMS``,
Twitch and YouTube by default; ``standard`` everywhere else); chorus.toml's scopes can override
any field of a ``SafetyPolicy`` in ``Policies.safety_for`` alone, because every decision of the
gate reads its values through it.

The presets:

- ``standard``: the shipped slur and harassment lists, links allowed, personal data allowed,
  injection phrases logged, a failing moderation model fails open.
- ``streamer`` (Twitch and YouTube: what the bot says is broadcast): the same lists, no links,
  no personal data (e-mail, phone, card, IP address), injection phrases refused, a failing
  moderation model fails closed.
- ``off``: no content rules (user block lists and quotas still apply).

Anything set explicitly (``CHORUS_MODERATION_LINKS`` ...) wins over the preset's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bot.events import ConversationKey
from bot.safety.rules import (
    Entry,
    Flag,
    Pattern,
    WordList,
    compile_pattern,
    find_injection,
    find_link,
    find_pattern,
    find_personal_data,
    normalise,
    parse_list,
    variants,
)
from bot.settings import ConfigError, QuotaSettings, SafetySettings
from bot.settings.safety import Action, InjectionAction, LinkPolicy

DEFAULT_LISTS = {"slur": "slurs.txt", "harassment": "harassment.txt"}


@dataclass(frozen=True)
class QuotaLimits:
    """``None``: no limit. Tokens are all input (cached included) plus output tokens."""

    user_messages_hour: int | None = None
    user_messages_day: int | None = None
    user_tokens_hour: int | None = None
    user_tokens_day: int | None = None
    channel_messages_hour: int | None = None
    channel_messages_day: int | None = None
    channel_tokens_hour: int | None = None
    channel_tokens_day: int | None = None
    cost_usd_per_day: float | None = None
    exempt_moderators: bool = True

    @property
    def enabled(self) -> bool:
        return any(
            getattr(self, name) is not None
            for name in self.__dataclass_fields__
            if name != "exempt_moderators"
        )

    @classmethod
    def from_settings(cls, settings: QuotaSettings) -> QuotaLimits:
        return cls(**settings.model_dump())


@dataclass(frozen=True)
class SafetyPolicy:
    """The rules of one scope. ``screen`` is pure and cheap (it runs on every message)."""

    preset: str
    words: WordList
    patterns: tuple[Pattern, ...] = ()
    links: LinkPolicy = "allow"
    link_domains: frozenset[str] = frozenset()
    personal_data: bool = False
    injection: InjectionAction = "log"
    action: Action = "refuse"
    fail_closed: bool = False
    quota: QuotaLimits = QuotaLimits()

    @property
    def enabled(self) -> bool:
        return self.preset != "off"

    def screen(self, text: str, *, inbound: bool = True, trusted: bool = False) -> Flag | None:
        """The first rule ``text`` breaks: lists, patterns, links (not for a ``trusted``
        author), personal data, and (inbound only) injection phrases; None when it breaks none."""
        if not self.enabled or not text:
            return None
        normalised = normalise(text)
        flag = (
            self.words.find(variants(normalised))
            or find_pattern(self.patterns, text)
            or (None if trusted else find_link(text, self.links, self.link_domains))
            or (find_personal_data(text) if self.personal_data else None)
        )
        if flag is None and inbound and self.injection != "off":
            flag = find_injection(normalised)
        return flag

    def action_for(self, flag: Flag) -> Action:
        """What happens to an inbound message with ``flag``: injection phrases are only logged
        unless the policy blocks them."""
        if flag.rule == "injection" and self.injection == "log":
            return "log"
        return self.action


PRESETS: dict[str, dict[str, object]] = {
    "standard": {"links": "allow", "personal_data": False, "injection": "log", "fail": "open"},
    "streamer": {"links": "deny", "personal_data": True, "injection": "block", "fail": "closed"},
    "off": {"links": "allow", "personal_data": False, "injection": "off", "fail": "open"},
}


def default_entries() -> list[Entry]:
    """The shipped lists (``bot/safety/data``), each entry named by file and line."""
    entries: list[Entry] = []
    data = resources.files(__package__).joinpath("data")
    for rule, name in DEFAULT_LISTS.items():
        words, _ = parse_list(data.joinpath(name).read_text("utf-8"), rule=rule, source=name)
        entries += words
    return entries


def operator_lists(settings: SafetySettings) -> tuple[list[Entry], list[Pattern]]:
    """``CHORUS_MODERATION_WORDS``, ``_PATTERNS`` and ``_LIST_FILE``, compiled; ``ConfigError``
    names the variable (and the file's line) of a pattern that does not compile."""
    words = [
        Entry("word", w, f"CHORUS_MODERATION_WORDS#{n}") for n, w in enumerate(settings.words, 1)
    ]
    sources = [(f"CHORUS_MODERATION_PATTERNS#{n}", p) for n, p in enumerate(settings.patterns, 1)]
    if settings.list_file is not None:
        path = Path(settings.list_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"CHORUS_MODERATION_LIST_FILE={path}: cannot read it: {exc}"
            ) from None
        more, patterns = parse_list(text, rule="word", source=f"CHORUS_MODERATION_LIST_FILE {path}")
        words += more
        sources += patterns
    compiled = []
    for source, pattern in sources:
        try:
            compiled.append(compile_pattern(source, pattern))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return words, compiled


def build_policy(
    preset: str,
    settings: SafetySettings,
    quota: QuotaSettings,
    *,
    words: WordList,
    patterns: tuple[Pattern, ...],
) -> SafetyPolicy:
    defaults = PRESETS[preset]
    fail = settings.fail or defaults["fail"]
    links = settings.links or ("domains" if settings.link_domains else defaults["links"])
    personal = settings.personal_data
    return SafetyPolicy(
        preset=preset,
        words=words,
        patterns=patterns,
        links=links,  # type: ignore[arg-type]  # one of the presets' literals
        link_domains=settings.link_domains,
        personal_data=bool(defaults["personal_data"]) if personal is None else personal,
        injection=settings.injection or defaults["injection"],  # type: ignore[arg-type]
        action=settings.action,
        fail_closed=fail == "closed",
        quota=QuotaLimits.from_settings(quota),
    )


class Policies:
    """Every scope's policy, compiled once at start."""

    def __init__(
        self, settings: SafetySettings | None = None, quota: QuotaSettings | None = None
    ) -> None:
        settings = settings or SafetySettings()
        quota = quota or QuotaSettings()
        entries, patterns = operator_lists(settings)
        if settings.default_lists:
            entries = default_entries() + entries
        words, compiled = WordList(entries), tuple(patterns)
        self.settings = settings
        self.by_preset = {
            name: build_policy(name, settings, quota, words=words, patterns=compiled)
            for name in PRESETS
        }
        self.preset = settings.preset
        self.platforms = settings.preset_platforms

    def safety_for(self, conversation: ConversationKey) -> SafetyPolicy:
        """The policy of ``conversation``: THE place a scope's overrides will apply."""
        if self.preset == "streamer":
            name = "streamer" if conversation.platform in self.platforms else "standard"
            return self.by_preset[name]
        return self.by_preset[self.preset]

    @property
    def moderates_anything(self) -> bool:
        return self.preset != "off"
