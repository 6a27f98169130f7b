"""Scopes: which scope a place matches and which value wins, the profile a message gets (cached
per channel, shared by channels with the same scopes), and what the router does with it
(engagement modes, memory and insights, reasoning, tools), over the real app with the scripted
model. Reload: a new configuration is applied whole or refused whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import prompts
from bot.app import Chorus
from bot.bus.topics import INBOUND, outbound_topic
from bot.cli_config import apply_reload
from bot.engagement.policy import PolicyConfig
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.llm.base import Provider
from bot.llm.scripted import ScriptedProvider
from bot.router.scoping import Profile, ScopedEngagement, Scoping
from bot.settings import ConfigError, ModelSpec, Settings, load_settings
from bot.settings.scopes import Scope, ScopeMatch, parse_match, resolve
from bot.state import keys

G, C, C2 = "123456789012345678", "223456789012345678", "323456789012345678"
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test-0001", "OPENAI_API_KEY": "sk-openai-test-0001"}
ENV = KEYS | {"CHORUS_MODEL": "anthropic:claude-test", "CHORUS_INSIGHTS_IN_PROCESS": "false"}


def settings_with(toml: str, **env: str) -> Settings:
    Path("chorus.toml").write_text(toml.lstrip("\n"), encoding="utf-8")
    return load_settings(environ=ENV | env, warn=False)


@pytest.fixture(autouse=True)
def _no_overrides_left() -> Iterator[None]:
    yield
    prompts.set_overrides({})


# -- matching ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected", "level"),
    [
        ("discord", ScopeMatch("discord"), 0),
        ("discord:1", ScopeMatch("discord", "1"), 1),
        ("discord:1/2", ScopeMatch("discord", "1", "2"), 2),
        ("slack:T1/C2", ScopeMatch("slack", "T1", "C2"), 2),
        ("twitch:#SomeChannel", ScopeMatch("twitch", "somechannel"), 1),
        ("console:ada", ScopeMatch("console", "ada"), 1),
    ],
)
def test_a_match_is_platform_server_and_channel(
    text: str, expected: ScopeMatch, level: int
) -> None:
    assert parse_match(text) == expected and expected.level == level


SCOPES = (
    Scope(match="discord", persona="pirate", reasoning="off"),
    Scope.model_validate({"match": f"discord:{G}", "tools": {"enabled": ["current_time"]}}),
    Scope(match=f"discord:{G}/{C}", persona="librarian", memory=False),
    Scope(match="twitch:somechannel", insights=False),
)


def test_each_key_comes_from_the_most_specific_scope_that_sets_it() -> None:
    here = resolve(SCOPES, "discord", G, C)
    assert here.scopes == (0, 1, 2)
    assert here.values["persona"] == "librarian" and here.origin["persona"] == 2
    assert here.values["reasoning"] == "off" and here.origin["reasoning"] == 0
    assert here.values["tools.enabled"] == {"current_time"} and here.origin["tools.enabled"] == 1
    assert here.values["memory"] is False
    neighbour = resolve(SCOPES, "discord", G, C2)
    assert neighbour.scopes == (0, 1) and neighbour.values["persona"] == "pirate"
    assert "memory" not in neighbour.values
    assert resolve(SCOPES, "discord", "999", C).scopes == (0,)  # another guild's channel id
    assert resolve(SCOPES, "discord", None, C).scopes == (0, 2)  # a DM or an unknown server
    assert resolve(SCOPES, "slack", G, C).scopes == ()


def test_twitch_matches_the_login_or_the_broadcaster_id() -> None:
    assert resolve(SCOPES, "twitch", "somechannel", "4242").scopes == (3,)
    assert resolve((Scope(match="twitch:4242"),), "twitch", "somechannel", "4242").scopes == (0,)
    assert resolve(SCOPES, "twitch", "other", "4243").scopes == ()


def message(
    text: str,
    *,
    channel: str = C,
    server: str | None = G,
    addressed: bool = True,
    ambient: bool = False,
    platform: str = "discord",
    msg_id: str = "m1",
) -> ChatMessage:
    return ChatMessage(
        platform=platform,
        id=msg_id,
        conversation=ConversationKey(platform=platform, channel=channel),
        author=Author(id="u1", display_name="Ada"),
        text=text,
        mentions_bot=addressed,
        ambient=ambient,
        server=server,
    )


@pytest.mark.parametrize(
    ("mode", "addressed", "policy_applies", "platform", "route"),
    [
        (None, False, True, "discord", "live"),
        (None, True, False, "discord", "answer"),
        ("addressed", False, True, "discord", "ignore"),
        ("addressed", True, False, "discord", "answer"),
        ("addressed", True, True, "twitch", "live"),  # a live chat's mention: cooldowns apply
        ("addressed", False, True, "twitch", "ignore"),
        ("ambient", False, False, "discord", "live"),  # an always-answer channel made ambient
        ("ambient", True, False, "discord", "answer"),
        ("always", False, True, "discord", "answer"),  # an ambient channel answered in full
    ],
)
def test_the_engagement_mode_routes_a_message(
    mode: str | None, addressed: bool, policy_applies: bool, platform: str, route: str
) -> None:
    profile = Profile("p", None, None, mode=mode)  # type: ignore[arg-type]
    chat = message("hi", addressed=addressed, ambient=not addressed, platform=platform)
    assert profile.route(chat, policy_applies) == route


# -- profiles ------------------------------------------------------------------------------------
CONFIG = f"""
[personas.pirate]
prompt = "You are a pirate."

[personas.librarian]
prompt = "You are a librarian."

[[scope]]
match = "discord"
persona = "pirate"

[[scope]]
match = "discord:{G}/{C}"
persona = "librarian"
model = "openai:gpt-x"
reasoning = "high"
tools.enabled = ["current_time"]
memory = false

[[scope]]
match = "slack"
model = "openai:gpt-x"
fallbacks = []
"""


class Chains:
    def __init__(self) -> None:
        self.built: list[tuple[ModelSpec, tuple[ModelSpec, ...]]] = []
        self.providers: list[ScriptedProvider] = []

    def __call__(self, spec: ModelSpec, fallbacks: tuple[ModelSpec, ...]) -> Provider:
        self.built.append((spec, fallbacks))
        self.providers.append(ScriptedProvider())
        return self.providers[-1]


def test_a_profile_per_set_of_scopes_cached_per_channel() -> None:
    chains, default = Chains(), ScriptedProvider()
    settings = settings_with(CONFIG, CHORUS_FALLBACK_MODELS="gemini:g", GEMINI_API_KEY="g")
    scoping = Scoping(settings, provider=default, chains=chains)
    here = scoping.profile(message("hi"))
    assert "You are a librarian." in here.assembler.system_prompt
    assert here.assembler.model == "gpt-x" and here.reasoning == "high" and not here.memory
    assert here.tools is not None and here.tools.allows("current_time")
    assert not here.tools.allows("fetch_page")
    # One chain per model and fallbacks: discord:G/C keeps the deployment's fallbacks, slack
    # sets none; both built when the configuration was loaded (credentials checked then).
    assert chains.built == [
        (ModelSpec("openai", "gpt-x"), (ModelSpec("gemini", "g"),)),
        (ModelSpec("openai", "gpt-x"), ()),
    ]
    assert here.agent.provider is chains.providers[0]
    other = scoping.profile(message("hi", channel=C2, msg_id="m2"))
    third = scoping.profile(message("hi", channel="423456789012345678", msg_id="m3"))
    assert other is third and "You are a pirate." in other.assembler.system_prompt
    assert other.agent.provider is default and other.assembler.model == "claude-test"
    assert scoping.profile(message("again")) is here  # cached for the channel
    assert scoping.default.assembler.system_prompt == prompts.render(
        "system", identity=prompts.render("persona/identity", bot_name="Chorus")
    )


def test_the_server_is_learnt_so_the_bots_own_turns_resolve_like_the_channel() -> None:
    toml = f'[personas.p]\nprompt = "P"\n[[scope]]\nmatch = "discord:{G}"\npersona = "p"\n'
    scoping = Scoping(settings_with(toml), provider=ScriptedProvider())
    conv = ConversationKey(platform="discord", channel=C)
    assert scoping.for_key(conv) is scoping.default  # nothing seen from that channel yet
    scoping.profile(message("hi"))
    synthetic = message("batch", server=None, msg_id="batch-1")  # a live-chat batch turn
    scoping.reload(settings_with(toml))
    assert scoping.profile(synthetic).assembler.system_prompt.startswith("P\n")
    assert scoping.for_key(conv) is scoping.profile(synthetic)


def test_scope_thresholds_apply_over_the_channels_config_and_follow_a_reload() -> None:
    toml = '[[scope]]\nmatch = "twitch"\nengagement = { min_pending = 3, min_gap_seconds = 9 }\n'
    scoping = Scoping(settings_with(toml), provider=ScriptedProvider())
    base = PolicyConfig(min_pending=8, user_cooldown_seconds=4)
    engagement = ScopedEngagement(base, {"twitch": base}, scoping=scoping)
    twitch = engagement.state(ConversationKey(platform="twitch", channel="4242")).config
    assert (twitch.min_pending, twitch.min_gap_seconds, twitch.user_cooldown_seconds) == (3, 9, 4)
    youtube = engagement.state(ConversationKey(platform="youtube", channel="live1")).config
    assert youtube == base
    scoping.reload(settings_with(toml.replace("min_pending = 3", "min_pending = 5")))
    engagement.refresh(base)
    assert (
        engagement.states[ConversationKey(platform="twitch", channel="4242")].config.min_pending
        == 5
    )


def test_thresholds_that_clash_are_refused_with_the_scope_line() -> None:
    toml = '[[scope]]\nmatch = "twitch"\nengagement.user_cooldown_seconds = 500\n'
    with pytest.raises(ConfigError, match=r"chorus.toml:1: \[\[scope\]\] 'twitch': engagement: "):
        Scoping(settings_with(toml), provider=ScriptedProvider())


def test_a_refused_reload_keeps_the_configuration_and_the_prompts_in_force() -> None:
    Path("batch.md").write_text("Answer {{names}} now.\n")
    good = '[prompts]\n"live/batch" = "batch.md"\n[personas.p]\nprompt = "P"\n'
    scoping = Scoping(settings_with(good), provider=ScriptedProvider())
    assert prompts.load("live/batch") == "Answer {{names}} now."
    before = scoping.default
    Path("bad.md").write_text("{{names}} {{weather}}")
    bad = '[prompts]\n"live/batch" = "bad.md"\n"live/bacth" = "batch.md"\n'
    with pytest.raises(ConfigError) as info:
        scoping.reload(settings_with(bad))
    message_text = str(info.value)
    assert "chorus.toml:2: prompts.live/batch: uses {{weather}}, which the code does not fill" in (
        message_text
    )
    assert "chorus.toml:3: prompts.live/bacth: no prompt is named 'live/bacth'; did you mean " in (
        message_text
    )
    assert scoping.default is before and "p" in scoping.settings.file.personas
    assert prompts.load("live/batch") == "Answer {{names}} now."


async def test_scope_models_are_closed_with_the_scoping() -> None:
    chains = Chains()
    scoping = Scoping(settings_with(CONFIG), provider=ScriptedProvider(), chains=chains)
    await scoping.aclose()
    assert [p.closed for p in chains.providers] == [True]  # one chain: openai:gpt-x alone


# -- the router with scopes ----------------------------------------------------------------------
@dataclass
class App:
    app: Chorus
    model: ScriptedProvider
    replies: asyncio.Queue[Reply]

    async def say(self, chat: ChatMessage) -> None:
        await self.app.bus.publish(INBOUND, chat)
        await self.app.bus.drain(timeout=10)


ROUTING = f"""
[[scope]]
match = "discord:{G}/{C}"
engagement.mode = "addressed"

[[scope]]
match = "discord:{G}/{C2}"
engagement.mode = "always"
memory = false
reasoning = "high"
tools.disabled = ["fetch_page"]

[[scope]]
match = "discord:{G}"
insights = false
"""


@pytest.fixture
async def routed() -> AsyncIterator[App]:
    model = ScriptedProvider()
    app = await Chorus.from_settings(settings_with(ROUTING), provider=model)
    replies: asyncio.Queue[Reply] = asyncio.Queue()

    async def collect() -> None:
        async for delivery in app.bus.consume(outbound_topic("discord"), Reply):
            replies.put_nowait(delivery.event)
            await delivery.ack()

    listener = asyncio.create_task(collect())
    async with app:
        yield App(app, model, replies)
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)


async def test_addressed_mode_ignores_what_does_not_address_the_bot(routed: App) -> None:
    await routed.say(message("anyone here?", addressed=False, ambient=True, msg_id="a1"))
    assert routed.model.requests == [] and routed.replies.empty()
    await routed.say(message("hello bot", msg_id="a2"))
    assert (await routed.replies.get()).reply_to_id == "a2"


async def test_always_mode_answers_an_ambient_line_at_once_without_memory(routed: App) -> None:
    await routed.say(message("nice weather", channel=C2, addressed=False, ambient=True))
    reply = await asyncio.wait_for(routed.replies.get(), 10)
    (request,) = routed.model.requests
    assert reply.reply_to_id == "m1" and request.reasoning == "high"
    assert "<context" not in str(request.messages)  # memory off: no notes, no context block
    assert [tool.name for tool in request.tools] == ["current_time"]
    redis = routed.app.redis
    assert await redis.zscore(keys.user_conversations("discord", "u1"), "discord:" + C2) is None


async def test_insights_off_in_a_scope_queues_no_job_while_memory_stays(routed: App) -> None:
    await routed.say(message("hello", msg_id="i1"))
    await asyncio.wait_for(routed.replies.get(), 10)
    (request,) = routed.model.requests
    assert "<context" in str(request.messages) and request.reasoning in ("off", "low")
    assert [tool.name for tool in request.tools] == ["current_time", "fetch_page"]
    redis = routed.app.redis
    assert await redis.zscore(keys.insights_due(), keys.insights_member("discord", "u1")) is None
    await routed.say(message("hello", channel="423456789012345678", server="9", msg_id="i2"))
    await asyncio.wait_for(routed.replies.get(), 10)
    due = await redis.zscore(keys.insights_due(), keys.insights_member("discord", "u1"))
    assert due is not None  # another server: the deployment's insights


async def test_app_reload_applies_live_settings_and_lists_the_rest(routed: App) -> None:
    settings = settings_with(
        ROUTING + '\n[agent]\nbot_name = "Renamed"\n',
        DISCORD_TOKEN="new-token",
        CHORUS_REDIS_URL="redis://127.0.0.1:1/0",
    )
    later = apply_reload(routed.app, settings)
    assert later == ["state.redis_url", "discord.token"]
    assert "You are Renamed" in routed.app.scoping.default.assembler.system_prompt


# -- where the server comes from -----------------------------------------------------------------
def test_adapters_put_the_server_on_each_message() -> None:
    from adapters.slack.convert import BotIdentity, ChannelPolicy, message_from_event
    from adapters.twitch import convert as twitch
    from tests import test_slack_convert as slack_tests
    from tests import test_twitch_convert as twitch_tests
    from tests.loopback.discord_server import GUILD_ID, load_fixture
    from tests.test_discord_convert import chat

    guild = chat(load_fixture("discord_message_create_reply")["d"])
    dm = chat(load_fixture("discord_message_create_docs_example")["d"])
    assert (guild.server, dm.server) == (str(GUILD_ID), None)
    team, none = BotIdentity(user_id="U0LAN0Z89", team_id="T111"), ChannelPolicy()
    from_bot = message_from_event(slack_tests.event("slack_app_mention"), bot=team, channels=none)
    mention = slack_tests.event("slack_app_mention", team="T222")
    from_event = message_from_event(mention, bot=team, channels=none)
    assert from_bot is not None and from_event is not None
    assert (from_bot.server, from_event.server) == ("T111", "T222")
    streamer = twitch.chat_message(twitch_tests._chat(), bot=twitch_tests.BOT)
    assert streamer is not None and streamer.server == "streamer"


def test_thresholds_that_clash_with_one_channels_own_config_fall_back_to_it() -> None:
    toml = '[[scope]]\nmatch = "youtube"\nengagement.user_cooldown_seconds = 100\n'
    scoping = Scoping(settings_with(toml), provider=ScriptedProvider())  # fine with the defaults
    strict = PolicyConfig(stale_after_seconds=60, user_cooldown_seconds=10)
    engagement = ScopedEngagement(PolicyConfig(), {"youtube": strict}, scoping=scoping)
    state = engagement.state(ConversationKey(platform="youtube", channel="live1"))
    assert state.config == strict  # 100 s would outlast a 60 s staleness: the channel's stays
