"""What one conversation's safety rules are: the presets, the compiled lists, the quota limits,
and ``safety_for(conversation)``, the ONE place that decides which apply where.

Why one function: moderation and quota settings are per scope. The deployment's rule is "the
preset's platforms" (``CHORUS_SAFETY_PRESET=streamer`` applies to
``CHORUS_SAFETY_PRESET_PLATFORMS``, Twitch and YouTube by default; ``standard`` everywhere else).
chorus.toml's ``[scope.safety]`` and ``[scope.quota]`` tables change that per scope:
``Policies.scoped`` turns a scope's keys into a ``ScopedSafety`` (its lists compiled and its
presets built once, when the configuration is loaded or reloaded; the router's scope profile
carries it, so a message costs no lookup beyond the profile's own), and ``safety_for`` picks the
preset. Every decision of the gate reads its values through it.

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

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bot.events import ConversationKey
from bot.quota.users import QuotaLimits
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
    use_model: bool = True  # the moderation model (where one is configured) checks here
    blocked_users: frozenset[str] = frozenset()  # user ids (the scope names the platform)
    allowed_users: frozenset[str] = frozenset()

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
    scope: Mapping[str, Any] | None = None,
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
        use_model=bool((scope or {}).get("moderation_model", True)),
        blocked_users=frozenset((scope or {}).get("blocked_users") or ()),
        allowed_users=frozenset((scope or {}).get("allowed_users") or ()),
    )


@dataclass(frozen=True)
class ScopedSafety:
    """One scope's policies: each preset with the scope's changes, compiled once. ``preset`` is
    the scope's own (None: the deployment's rule by platform decides)."""

    preset: str | None
    by_preset: Mapping[str, SafetyPolicy]


SETTINGS_KEYS = ("links", "link_domains", "personal_data", "injection", "action", "fail")


class Policies:
    """The deployment's policies, compiled once at start, and each scope's (``scoped``)."""

    def __init__(
        self, settings: SafetySettings | None = None, quota: QuotaSettings | None = None
    ) -> None:
        settings = settings or SafetySettings()
        quota = quota or QuotaSettings()
        entries, patterns = operator_lists(settings)
        if settings.default_lists:
            entries = default_entries() + entries
        self._entries, self._patterns = entries, tuple(patterns)
        self.words = WordList(entries)
        self.settings, self.quota = settings, quota
        self.default = ScopedSafety(None, self._presets(settings, quota, self.words, {}))
        self.by_preset = self.default.by_preset
        self.preset = settings.preset
        self.platforms = settings.preset_platforms

    def _presets(
        self,
        settings: SafetySettings,
        quota: QuotaSettings,
        words: WordList,
        scope: Mapping[str, Any],
        patterns: tuple[Pattern, ...] = (),
    ) -> dict[str, SafetyPolicy]:
        compiled = self._patterns + patterns
        return {
            name: build_policy(name, settings, quota, words=words, patterns=compiled, scope=scope)
            for name in PRESETS
        }

    def scoped(self, values: Mapping[str, Any]) -> ScopedSafety:
        """A scope's policies from its resolved keys (``safety.*``, ``quota.*``); the
        deployment's when it sets none. ``ValueError`` names the key that cannot apply."""
        scope = {k.removeprefix("safety."): v for k, v in values.items() if k[:7] == "safety."}
        limits = {k.removeprefix("quota."): v for k, v in values.items() if k[:6] == "quota."}
        if not scope and not limits:
            return self.default
        if scope.get("moderation_model") and self.settings.model is None:
            raise ValueError(
                "safety.moderation_model: no moderation model is configured for the deployment "
                "(CHORUS_MODERATION_MODEL); a scope can only turn it off"
            )
        added = [
            Entry("word", w, f"safety.words#{n}") for n, w in enumerate(scope.get("words") or (), 1)
        ]
        words = WordList(self._entries + added) if added else self.words
        patterns = tuple(
            compile_pattern(f"safety.patterns#{n}", p)
            for n, p in enumerate(scope.get("patterns") or (), 1)
        )
        changed = {k: scope[k] for k in SETTINGS_KEYS if k in scope}
        if "link_domains" in changed and "links" not in changed:
            changed["links"] = "domains"
        settings = self.settings.model_copy(update=changed)
        quota = self.quota.model_copy(update=limits)
        by_preset = self._presets(settings, quota, words, scope, patterns)
        return ScopedSafety(scope.get("preset"), by_preset)

    def safety_for(
        self, conversation: ConversationKey, scoped: ScopedSafety | None = None
    ) -> SafetyPolicy:
        """The policy of ``conversation`` under its scope's ``scoped`` rules (the deployment's
        when None): the scope's preset, else the deployment's by platform."""
        scoped = scoped or self.default
        if scoped.preset is not None:
            return scoped.by_preset[scoped.preset]
        if self.preset == "streamer":
            name = "streamer" if conversation.platform in self.platforms else "standard"
            return scoped.by_preset[name]
        return scoped.by_preset[self.preset]

    @property
    def moderates_anything(self) -> bool:
        return self.preset != "off"


def describe(policy: SafetyPolicy, *, model: str | None) -> list[tuple[str, str]]:
    """The effective rules of one place as (name, value) lines, for ``chorus config --scope``
    (counts of list entries, never the entries of the shipped lists)."""
    quota = policy.quota
    limits = [
        f"{name}={getattr(quota, name)}"
        for name in quota.__dataclass_fields__
        if name != "exempt_moderators" and getattr(quota, name) is not None
    ]
    sources = sorted({entry.source.split("#")[0].split(":")[0] for entry in policy.words.entries})
    domains = ", ".join(sorted(policy.link_domains)) or "(none)"
    return [
        ("preset", policy.preset),
        ("block list words", f"{len(policy.words)} ({', '.join(sources) or 'none'})"),
        ("block list patterns", ", ".join(p.source for p in policy.patterns) or "(none)"),
        (
            "links",
            f"{policy.links} (domains: {domains})" if policy.links == "domains" else policy.links,
        ),
        ("personal data", "blocked" if policy.personal_data else "allowed"),
        ("injection phrases", policy.injection),
        ("flagged message action", policy.action),
        ("moderation model", (model or "(none)") if policy.use_model else "off here"),
        ("moderation model fails", "closed" if policy.fail_closed else "open"),
        ("blocked users (chorus.toml)", ", ".join(sorted(policy.blocked_users)) or "(none)"),
        ("trusted users (chorus.toml)", ", ".join(sorted(policy.allowed_users)) or "(none)"),
        ("quotas", ", ".join(limits) or "(none)"),
        ("quotas exempt moderators", "yes" if quota.exempt_moderators else "no"),
    ]
