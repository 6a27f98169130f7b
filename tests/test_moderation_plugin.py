"""The first-party ``moderation`` plugin: each spam filter, the escalation ladder and its decay,
``!permit``, the exemptions, and loading from ``[plugins.moderation]`` (a bad value named with its
``chorus.toml`` line). The plugin runs through the real loader, settings and store; what it asks
of the platform (``ModerationRequest``) and what it says are captured where the bot would
publish them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, ModerationRequest, Role
from bot.plugins.builtin.moderation import check, step_for
from bot.plugins.builtin.moderation.filters import (
    caps,
    emote_count,
    fingerprint,
    has_link,
    symbols,
    zalgo,
)
from bot.plugins.events import EventContext
from bot.plugins.loader import LoadedPlugins, load_plugins
from bot.plugins.reach import Reach
from bot.settings import ConfigError, load_settings
from bot.state.plugin_store import MemoryPluginStore, PluginKV, RedisPluginStore

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0001"}
ROOM = ConversationKey(platform="twitch", channel="1971641")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """The plugin loaded from a chorus.toml, with what it asks for and says captured."""

    def __init__(self, toml: str, kv: PluginKV | None = None) -> None:
        Path("chorus.toml").write_text(toml.lstrip("\n"), encoding="utf-8")
        settings = load_settings(environ=KEYS, warn=False)
        self.loaded: LoadedPlugins = load_plugins(
            settings.plugins, file=settings.file, variables=settings.variable
        )
        self.clock = Clock()
        self.kv = kv or MemoryPluginStore(clock=self.clock)
        self.requests: list[ModerationRequest] = []
        self.said: list[str] = []
        self.ids = 0

        async def send(plugin: str, where: ConversationKey, text: str, answering: object) -> None:
            self.said.append(text)

        async def moderate(request: ModerationRequest) -> None:
            self.requests.append(request)

        self.loaded.bind(self.kv, Reach(send, moderate_function=moderate))

    def line(self, text: str, user: str = "42", name: str = "fan42", *roles: Role) -> ChatMessage:
        self.ids += 1
        return ChatMessage(
            platform="twitch",
            id=f"msg-{self.ids}",
            conversation=ROOM,
            author=Author(id=user, display_name=name, roles=frozenset(roles)),
            text=text,
            ambient=True,
        )

    async def say(self, text: str, user: str = "42", name: str = "fan42", *roles: Role) -> str:
        (plugin,) = self.loaded.plugins
        message = self.line(text, user, name, *roles)
        step = await check(EventContext("message", message, None, plugin.services))
        return step or "-"

    def actions(self) -> list[str]:
        return [f"{r.action}:{r.message_id or r.user_id}" for r in self.requests]


ON = "[plugins.moderation]\n"


# -- the filters, one by one -----------------------------------------------------------------------
def test_caps_fires_over_its_ratio_and_only_past_its_minimum_length() -> None:
    assert caps("WHY IS NOBODY ANSWERING ME", 0.7, 12)
    assert not caps("Why is nobody answering me", 0.7, 12)
    assert not caps("LOL OK", 0.7, 12)  # too short to be shouting
    assert caps("LOL OK", 0.7, 4)


def test_symbols_fire_on_symbol_spam_not_on_punctuated_text_or_emoji() -> None:
    assert symbols("!!!!!!!!!!!!!!!!!!!! ^^^^^^^^", 0.5, 12)
    assert symbols("(╯°□°)╯︵ ┻━┻ ░░▒▒▓▓", 0.5, 12)
    assert not symbols("Well, that's it: see you tomorrow, folks!", 0.5, 12)
    assert not symbols("🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉", 0.5, 12)  # emoji are the emote filter's
    assert not symbols("?!?!", 0.5, 12)


def test_emote_count_counts_emoji_shortcodes_and_emote_words() -> None:
    names = frozenset({"Kappa", "LUL"})
    assert emote_count("Kappa Kappa LUL 🎉 :pog:", names) == 5
    assert emote_count("Kappachino is a drink", names) == 0


def test_zalgo_needs_stacked_marks_and_spares_ordinary_accents() -> None:
    assert zalgo("h\u0336\u0337\u0338ello", 3)
    assert not zalgo("Tiếng Việt, café, naïve", 3)  # one or two marks per letter


def test_links_are_found_with_a_scheme_www_or_a_bare_domain() -> None:
    assert has_link("go to https://example.org/x now")
    assert has_link("www.spam.example")
    assert has_link("cheap followers at bestviewers.shop")
    assert not has_link("3.14 is pi. ok.")
    assert not has_link("no links here")


def test_a_fingerprint_ignores_case_and_spacing() -> None:
    assert fingerprint("Buy  NOW") == fingerprint("buy now ")
    assert fingerprint("buy now") != fingerprint("buy later")


# -- the ladder --------------------------------------------------------------------------------------
def test_the_last_step_repeats_past_the_end_of_the_ladder() -> None:
    steps: list = ["warn", "delete", "timeout"]  # type: ignore[type-arg]
    assert [step_for(n, steps) for n in (1, 2, 3, 4, 9)] == [
        "warn",
        "delete",
        "timeout",
        "timeout",
        "timeout",
    ]


async def test_a_link_is_warned_then_deleted_then_timed_out_and_never_banned_by_default() -> None:
    rig = Rig(ON)
    steps = [await rig.say(f"free followers at spam{n}.shop") for n in range(5)]
    assert steps == ["warn", "delete", "timeout", "timeout", "timeout"]
    assert rig.actions()[:4] == ["delete:msg-1", "delete:msg-2", "delete:msg-3", "timeout:42"]
    assert not [r for r in rig.requests if r.action == "ban"]
    timeout = next(r for r in rig.requests if r.action == "timeout")
    assert timeout.seconds == 600 and timeout.actor == "rule:links"
    assert "offence 3" in timeout.reason
    assert rig.said[0].startswith("@fan42, please stop: a link without a moderator's !permit")
    assert rig.said[1].startswith("@fan42 is timed out for 10 min")


async def test_with_ban_on_the_offence_after_the_timeout_bans() -> None:
    rig = Rig(ON + "ban = true\ntimeout_seconds = 120\n")
    steps = [await rig.say("WHY IS NOBODY EVER ANSWERING ME") for _ in range(4)]
    assert steps == ["warn", "delete", "timeout", "ban"]
    assert [r.action for r in rig.requests][-2:] == ["delete", "ban"]
    assert next(r for r in rig.requests if r.action == "timeout").seconds == 120


async def test_offences_lapse_after_a_quiet_period() -> None:
    rig = Rig(ON + "decay_seconds = 600\n")
    assert await rig.say("spam.shop") == "warn"
    rig.clock.now += 599
    assert await rig.say("spam.shop again") == "delete"  # within the period: climbs
    rig.clock.now += 601  # quiet for longer than decay_seconds since the last offence
    assert await rig.say("spam.shop once more") == "warn"


async def test_offences_are_counted_per_user_and_per_channel() -> None:
    rig = Rig(ON)
    assert await rig.say("spam.shop", "1", "one") == "warn"
    assert await rig.say("spam.shop", "2", "two") == "warn"
    assert await rig.say("spam.shop", "1", "one") == "delete"


# -- permit and exemptions ---------------------------------------------------------------------------
async def test_permit_lets_one_link_through_within_its_time() -> None:
    rig = Rig(ON)
    assert await rig.say("!permit @Fan42", "9", "mod", Role.MODERATOR) == "-"
    assert rig.said == ["@fan42 may post one link in the next 60 seconds."]
    assert await rig.say("my art: https://art.example.com") == "-"
    assert rig.requests == []
    assert await rig.say("and another: https://art.example.com") == "warn"  # one link only


async def test_permit_expires_and_is_for_moderators_only() -> None:
    rig = Rig(ON)
    assert await rig.say("!permit fan42", "7", "viewer") == "-"  # a viewer cannot permit
    assert await rig.say("https://a.example.com") == "warn"
    await rig.say("!permit fan42", "9", "mod", Role.MODERATOR)
    rig.clock.now += 61
    assert await rig.say("https://b.example.com") == "delete"


async def test_moderators_and_subscribers_are_exempt_unless_configured_otherwise() -> None:
    rig = Rig(ON)
    assert await rig.say("spam.shop", "9", "mod", Role.MODERATOR) == "-"
    assert await rig.say("spam.shop", "8", "sub", Role.SUBSCRIBER) == "-"
    strict = Rig(ON + "exempt_subscribers = false\n")
    assert await strict.say("spam.shop", "8", "sub", Role.SUBSCRIBER) == "warn"


async def test_each_filter_feeds_the_ladder_and_can_be_turned_off() -> None:
    rig = Rig(ON)
    assert await rig.say("THIS STREAM IS THE BEST EVER", "1") == "warn"
    assert await rig.say("$$$$$$$$$$$$$$$$$$$$$$$$$$$$", "2") == "warn"
    assert await rig.say("Kappa " * 9, "3") == "warn"
    assert await rig.say("he\u0336\u0337\u0338\u0339llo", "4") == "warn"
    assert [r.actor for r in rig.requests] == [
        "rule:caps",
        "rule:symbols",
        "rule:emotes",
        "rule:zalgo",
    ]
    off = Rig(ON + 'filters = ["links"]\n')
    assert await off.say("THIS STREAM IS THE BEST EVER") == "-"


async def test_repeats_of_one_user_and_copypasta_across_users() -> None:
    rig = Rig(ON)
    assert [await rig.say("hello?", "1") for _ in range(3)] == ["-", "-", "warn"]
    assert rig.requests[0].actor == "rule:repeat"
    pasta = "this is a long copied message everyone spams"
    steps = [await rig.say(pasta, str(u)) for u in (10, 11, 12, 13)]
    assert steps == ["-", "-", "-", "warn"]
    assert rig.requests[-1].actor == "rule:copypasta"
    assert [await rig.say("gg", str(u)) for u in (20, 21, 22, 23, 24)] == ["-"] * 5  # too short


async def test_a_scope_turns_the_plugin_off_for_its_channel() -> None:
    rig = Rig(
        ON + f'\n[[scope]]\nmatch = "twitch:{ROOM.channel}"\nplugins.moderation.enabled = false\n'
    )
    assert await rig.say("spam.shop") == "-"


async def test_offences_are_counted_atomically_across_workers(real_redis: Redis) -> None:
    rig = Rig(
        ON + "ladder = ['warn', 'delete', 'timeout', 'ban']\nban = true\n",
        RedisPluginStore(real_redis),
    )
    steps = await asyncio.gather(*(rig.say(f"spam{n}.shop", "77") for n in range(4)))
    assert sorted(steps) == ["ban", "delete", "timeout", "warn"]  # each count taken once


# -- loading ------------------------------------------------------------------------------------------
def test_the_plugins_table_loads_the_first_party_plugin() -> None:
    rig = Rig(ON)
    (plugin,) = rig.loaded.plugins
    assert plugin.name == "moderation"
    assert plugin.source is not None and plugin.source.origin == "built-in, [plugins.moderation]"
    assert {e.kind for e in plugin.events} == {"message", "screened"}
    assert Rig("").loaded.plugins == []  # no table: not loaded


def test_a_bad_setting_is_refused_with_its_line() -> None:
    with pytest.raises(ConfigError) as info:
        Rig(ON + "timeout_seconds = 0\nfilter = ['links']\n")
    text = str(info.value)
    assert "chorus.toml:2" in text and "timeout_seconds" in text
    assert "chorus.toml:3" in text and "did you mean 'filters'" in text
