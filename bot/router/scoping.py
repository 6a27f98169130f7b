"""Scopes at run time: what each message gets from ``chorus.toml``'s ``[[scope]]`` tables.

A ``Profile`` is everything a turn takes from its scope: the prompt assembler (the model name
and the persona's system text, rendered once, so every request of a scope starts with the same
bytes and the provider's cache holds), the agent (over the scope's model and fallbacks), the
reasoning mode, the tool lists, the engagement mode and thresholds, memory and insights. One
profile per set of matching scopes: a thousand channels under ``discord`` share one, and with it
one assembler and one provider.

Why it must be cheap: ``profile`` runs for every message. Its answer is kept per
``(platform, channel)`` (threads share their channel's), so a message costs one dict lookup on
a tuple of two strings; the scopes are matched once per channel. The server a channel belongs
to (the Discord guild, the Slack team, the Twitch login) is learnt from the messages that carry
it and outlives reloads, so the live-chat turns the bot starts itself (which carry no server)
and a channel's engagement thresholds resolve like the channel's messages.

``reload`` builds a complete new book (prompt overrides checked and set, personas rendered,
providers built, thresholds validated) before it swaps it in; any problem is a ``ConfigError``
naming the file, line and key, and the running book stays. Providers are kept for the life of
the process (a turn in flight may still use one) and closed with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cachetools import FIFOCache
from pydantic import ValidationError

import prompts
from bot.agent.loop import Agent, LoopLimits
from bot.agent.prompting import PromptAssembler, system_prompt
from bot.agent.reasoning import Level
from bot.engagement.policy import Engagement, PolicyConfig
from bot.engagement.turns import policy_config
from bot.events import ChatMessage, ConversationKey
from bot.llm.base import Provider
from bot.llm.fallback import build_chain
from bot.memory.summaries import SummaryPlan
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.router.turn import RouterLimits
from bot.safety.canary import with_canary
from bot.safety.policy import Policies, ScopedSafety
from bot.settings import ConfigError, ModelSpec, Settings, parse_model_spec
from bot.settings.scopes import LIVE_PLATFORMS, SERVER_PLATFORMS, Mode, Persona, flatten, resolve
from bot.tools.toolbox import ChannelToolConfig, Toolbox

log = logging.getLogger("chorus.scopes")

Route = Literal["ignore", "live", "answer"]
ChainKey = tuple[ModelSpec, tuple[ModelSpec, ...]]
ChainFactory = Callable[[ModelSpec, tuple[ModelSpec, ...]], Provider]
CHANNELS_KEPT = 50_000  # (platform, channel) -> profile entries before the cache starts over


@dataclass(frozen=True, eq=False)
class Profile:
    """What a turn takes from its scope (``name``: the matching scopes, or ``deployment``)."""

    name: str
    assembler: PromptAssembler
    agent: Agent
    reasoning: str = "auto"
    reasoning_max: Level = "medium"
    tools: ChannelToolConfig | None = None  # replaces the deployment's lists here
    mode: Mode | None = None
    engagement: Mapping[str, Any] = field(default_factory=dict)  # threshold updates
    memory: bool = True
    insights: bool = True
    summaries: SummaryPlan | None = None  # summaries and community notes here (None: none)
    safety: ScopedSafety | None = None  # the scope's moderation and quotas, compiled
    knowledge: tuple[str, ...] = ()  # the knowledge base's sources (files, folders, URLs)

    def route(self, message: ChatMessage, policy_applies: bool) -> Route:
        """Whether a message is answered, goes through the live-chat policy, or is ignored:
        ``addressed`` ignores what does not address the bot, ``ambient`` lets the policy decide
        on what does not, ``always`` answers every message it gets (not on live chats)."""
        mode, addressed = self.mode, message.addressed
        if mode == "addressed" and not addressed:
            return "ignore"
        if mode is None or mode == "addressed" or message.platform in LIVE_PLATFORMS:
            return "live" if policy_applies else "answer"
        return "live" if mode == "ambient" and not addressed else "answer"


@dataclass
class _Book:
    """One configuration's profiles, one per set of matching scopes (``()``: the deployment's)."""

    settings: Settings
    systems: dict[str, str]  # persona name -> system text
    by_scopes: dict[tuple[int, ...], Profile] = field(default_factory=dict)
    by_channel: dict[tuple[str, str], Profile] = field(default_factory=dict)


class Scoping:
    """The profile of each message, from the current configuration; ``reload`` swaps it."""

    def __init__(
        self,
        settings: Settings,
        *,
        provider: Provider,
        tools: Toolbox | None = None,
        chains: ChainFactory | None = None,
        metrics: MetricsSink | None = None,
        agent: Agent | None = None,
        canary: str | None = None,
        policies: Policies | None = None,
    ) -> None:
        """``provider`` answers for the deployment's model and fallbacks (``agent``, when given,
        is the deployment's agent over it); ``chains`` builds the chain of another model and
        its fallbacks (a scope's); ``canary`` ends every persona's system text, the same for the
        process's life (the leak check knows it); ``policies`` compiles each scope's safety
        tables (none: the gate's deployment rules). Raises ``ConfigError`` like ``reload``."""
        self.tools = tools
        self.policies = policies
        self.canary = canary
        self.metrics: MetricsSink = metrics or NullMetrics()
        self._chains = chains
        key = _chain_key(settings)
        self._providers: dict[ChainKey, Provider] = {key: provider}
        self._owned: list[Provider] = []
        self._agents: dict[int, Agent] = {id(provider): agent} if agent is not None else {}
        # learnt servers, bounded: the channel whose server was learnt longest ago goes first
        self._servers: FIFOCache[tuple[str, str], str] = FIFOCache(CHANNELS_KEPT)
        self._book = self._build(settings)

    @property
    def default(self) -> Profile:
        """The deployment's profile: for every message no scope matches."""
        return self._book.by_scopes[()]

    @property
    def settings(self) -> Settings:
        """The settings of the configuration in force (the last one loaded successfully)."""
        return self._book.settings

    # -- per message ------------------------------------------------------------------------
    def profile(self, message: ChatMessage) -> Profile:
        conv = message.conversation
        key = (conv.platform, conv.channel)
        book = self._book
        found = book.by_channel.get(key)
        if found is not None:
            return found
        if message.server is not None:
            self._servers[key] = message.server  # learnt again: the newest
        return self._resolve(book, key)

    def safety_of(self, message: ChatMessage) -> ScopedSafety | None:
        """The compiled safety rules of ``message``'s scope (what the safety gate asks)."""
        return self.profile(message).safety

    def for_key(self, conv: ConversationKey) -> Profile:
        """The profile of a channel without a message at hand (a live-chat turn the bot
        starts, a channel's thresholds); not kept while a server it may belong to is unknown."""
        key = (conv.platform, conv.channel)
        found = self._book.by_channel.get(key)
        if found is not None:
            return found
        known = key in self._servers or conv.platform not in SERVER_PLATFORMS
        return self._resolve(self._book, key, keep=known)

    def policy(self, conv: ConversationKey, base: PolicyConfig) -> PolicyConfig:
        """``base`` (the deployment's thresholds for this channel) with the scope's changes."""
        profile = self.for_key(conv)
        if not profile.engagement:
            return base
        try:
            return PolicyConfig.model_validate(base.model_dump() | dict(profile.engagement))
        except ValidationError as exc:  # checked against the defaults at load; not this base
            log.warning(
                "a scope's engagement thresholds clash with this channel's; using the channel's",
                extra={"scope": profile.name, "conversation": str(conv), "error": str(exc)},
            )
            return base

    def _resolve(self, book: _Book, key: tuple[str, str], keep: bool = True) -> Profile:
        platform, channel = key
        resolved = resolve(book.settings.file.scopes, platform, self._servers.get(key), channel)
        profile = book.by_scopes.get(resolved.scopes)
        if profile is None:
            name = " > ".join(book.settings.file.scopes[i].match for i in resolved.scopes)
            profile = self._profile(book, resolved.values, name or "deployment")
            book.by_scopes[resolved.scopes] = profile
        if keep:
            if len(book.by_channel) >= CHANNELS_KEPT:
                book.by_channel.clear()
            book.by_channel[key] = profile
        return profile

    # -- building ---------------------------------------------------------------------------
    def reload(self, settings: Settings) -> None:
        """Swap in ``settings``'s scopes, personas and prompt overrides, or raise
        ``ConfigError`` (file, line, key) and keep the ones in force."""
        self._book = self._build(settings)

    def _build(self, settings: Settings) -> _Book:
        previous = prompts.set_overrides(prompt_overrides(settings))
        try:
            book = _Book(settings, systems=personas(settings, self.canary))
            book.by_scopes[()] = self._profile(book, {}, "deployment")
            file = settings.file
            for index, scope in enumerate(file.scopes):  # every scope's parts, checked now
                try:
                    self.policy_of(self._profile(book, flatten(scope), scope.match), settings)
                except (ConfigError, ValueError) as exc:
                    raise ConfigError(
                        f"{file.where(f'scope.{index}')}: [[scope]] {scope.match!r}: {exc}"
                    ) from None
        except BaseException:
            prompts.set_overrides(previous)
            raise
        self._warn_unknown_tools(settings)
        return book

    @staticmethod
    def policy_of(profile: Profile, settings: Settings) -> PolicyConfig | None:
        """The profile's thresholds over the deployment's (ValueError when they clash)."""
        if not profile.engagement:
            return None
        base = policy_config(settings.engagement).model_dump()
        try:
            return PolicyConfig.model_validate(base | dict(profile.engagement))
        except ValidationError as exc:
            problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            raise ValueError(f"engagement: {problems}") from None

    def _profile(self, book: _Book, values: Mapping[str, Any], name: str) -> Profile:
        settings = book.settings
        agent_settings, tools = settings.agent, settings.tools
        spec, fallbacks = _chain_key(settings, values)
        provider = self._provider(spec, fallbacks)
        persona = str(values.get("persona", "default"))
        enabled = values.get("tools.enabled", tools.tools_enabled)
        disabled = values.get("tools.disabled", tools.tools_disabled)
        engagement = {
            key.removeprefix("engagement."): value
            for key, value in values.items()
            if key.startswith("engagement.") and key != "engagement.mode"
        }
        return Profile(
            name=name,
            assembler=PromptAssembler(
                model=spec.model,
                system_prompt=book.systems[persona],
                max_tokens=agent_settings.max_output_tokens,
                vision=agent_settings.vision,
            ),
            agent=self._agent(provider, settings),
            reasoning=values.get("reasoning", agent_settings.reasoning),
            reasoning_max=values.get("reasoning_max", agent_settings.reasoning_max),
            tools=(
                ChannelToolConfig(enabled=enabled, disabled=disabled)
                if "tools.enabled" in values or "tools.disabled" in values
                else None
            ),
            mode=values.get("engagement.mode"),
            engagement=engagement,
            memory=bool(values.get("memory", True)),
            insights=bool(values.get("insights", settings.memory.insights_enabled)),
            summaries=SummaryPlan.of(settings.memory, values),
            safety=self.policies.scoped(values) if self.policies is not None else None,
            knowledge=tuple(values.get("knowledge", settings.memory.knowledge_sources)),
        )

    def _provider(self, spec: ModelSpec, fallbacks: tuple[ModelSpec, ...]) -> Provider:
        key = (spec, fallbacks)
        provider = self._providers.get(key)
        if provider is None:
            if self._chains is None:
                raise ConfigError(f"model {spec}: no way to build another model here")
            provider = self._providers[key] = self._chains(spec, fallbacks)
            self._owned.append(provider)
        return provider

    def _agent(self, provider: Provider, settings: Settings) -> Agent:
        agent = self._agents.get(id(provider))
        if agent is None:
            limits = LoopLimits(
                max_iterations=settings.agent.max_tool_iterations,
                budget_seconds=settings.agent.turn_budget_seconds,
            )
            agent = Agent(provider, metrics=self.metrics, tools=self.tools, limits=limits)
            self._agents[id(provider)] = agent
        return agent

    def _warn_unknown_tools(self, settings: Settings) -> None:
        if self.tools is None:
            return
        known = set(self.tools.names)
        for scope in settings.file.scopes:
            lists = scope.tools
            named = (
                (lists.enabled or frozenset()) | (lists.disabled or frozenset()) if lists else set()
            )
            for name in sorted(named - known):
                log.warning(
                    "a scope names an unknown tool",
                    extra={"scope": scope.match, "tool": name, "known": ",".join(sorted(known))},
                )

    async def aclose(self) -> None:
        """Close the providers built for scopes (the deployment's belongs to its creator)."""
        for provider in reversed(self._owned):
            try:
                await provider.aclose()
            except Exception:
                log.warning("error while closing a scope's model", exc_info=True)
        self._owned.clear()


class FixedScoping:
    """One profile for every message: a router built without chorus.toml's scopes (tests,
    benchmarks) gets its assembler, agent and reasoning limits as the deployment's."""

    def __init__(self, profile: Profile) -> None:
        self.default = profile

    @classmethod
    def of(cls, assembler: PromptAssembler, agent: Agent, limits: RouterLimits) -> FixedScoping:
        reasoning, most = limits.reasoning, limits.reasoning_max
        return cls(Profile("deployment", assembler, agent, reasoning, most))

    def profile(self, message: ChatMessage) -> Profile:
        return self.default


class ScopedEngagement(Engagement):
    """The live-chat policy's channel configs with each channel's scope applied on top."""

    def __init__(
        self,
        default: PolicyConfig | None = None,
        overrides: Mapping[str, PolicyConfig] | None = None,
        *,
        scoping: Scoping,
    ) -> None:
        super().__init__(default, overrides)
        self.scoping = scoping

    def config_for(self, key: ConversationKey) -> PolicyConfig:
        return self.scoping.policy(key, super().config_for(key))

    def refresh(
        self, default: PolicyConfig, overrides: Mapping[str, PolicyConfig] | None = None
    ) -> None:
        """After a reload: the new thresholds for every channel this process holds."""
        self.default, self.overrides = default, dict(overrides or {})
        for key, state in self.states.items():
            state.config = self.config_for(key)


def chain_factory(settings: Settings, on_fallback: Callable[[str, str], None]) -> ChainFactory:
    """How a scope's model and fallbacks become a provider chain: the deployment's keys, base
    URLs, breaker and fallback metric (``settings`` of the start: keys take a restart)."""

    def build(spec: ModelSpec, fallbacks: tuple[ModelSpec, ...]) -> Provider:
        models = ",".join(str(f) for f in fallbacks)
        fallback = settings.fallback.model_copy(update={"models": models})
        return build_chain(settings.llm, spec, fallback, on_fallback=on_fallback)

    return build


def personas(settings: Settings, canary: str | None = None) -> dict[str, str]:
    """The system text of each persona (``default`` is ``[persona]``, else today's text),
    ending with the deployment's canary."""
    file, name = settings.file, settings.agent.bot_name
    return {
        key: with_canary(_system(persona, name), canary)
        for key, persona in {"default": file.persona, **file.personas}.items()
    }


def _system(persona: Persona, bot_name: str) -> str:
    return system_prompt(
        persona.name or bot_name,
        persona=persona.prompt,
        language=persona.language,
        style=persona.style,
    )


def prompt_overrides(settings: Settings) -> dict[str, str]:
    """The file's ``[prompts]`` texts, each checked against the prompt it replaces."""
    file = settings.file
    problems = []
    for name, text in file.prompt_texts.items():
        problem = prompts.check_override(name, text)
        if problem is not None:
            problems.append(f"{file.where(f'prompts.{name}')}: prompts.{name}: {problem}")
    if problems:
        raise ConfigError("invalid configuration file:\n  " + "\n  ".join(problems))
    return dict(file.prompt_texts)


def _chain_key(settings: Settings, values: Mapping[str, Any] | None = None) -> ChainKey:
    values = values or {}
    spec = settings.llm.model_spec()
    if "model" in values:
        spec = parse_model_spec(str(values["model"]), "model")
    fallbacks = tuple(settings.fallback.specs())
    if "fallbacks" in values:
        fallbacks = tuple(parse_model_spec(text, "fallbacks") for text in values["fallbacks"])
    return spec, tuple(dict.fromkeys(f for f in fallbacks if f != spec))
