"""The ``commands`` built-in plugin, driven through its real handler on the in-memory store:
variables, cooldowns (global and per user), the role gate, aliases, what moderators manage in
chat and what viewers may not, and the settings refused with their ``chorus.toml`` line."""

from __future__ import annotations

import asyncio
import re

import pytest
from redis.asyncio import Redis

import prompts
from bot.events import Role
from bot.plugins.builtin import stream
from bot.plugins.builtin.expand import BadOption, Variables, expand, parse_definition
from bot.settings import ConfigError
from bot.state.plugin_store import RedisPluginStore
from tests.builtin_rig import load

MOD = frozenset({Role.MODERATOR})
SUB = frozenset({Role.SUBSCRIBER})

FILE = """
[plugins.commands]
default_cooldown = 0

[plugins.commands.commands.discord]
text = "Join us: example.org/discord, {user}"
aliases = ["dc", "server"]

[plugins.commands.commands.hug]
text = "{user} hugs {touser} ({count})"

[plugins.commands.commands.subs]
text = "subscribers only"
role = "subscriber"

[plugins.commands.commands.mods]
text = "moderators only"
role = "moderator"

[plugins.commands.commands.slow]
text = "slow"
cooldown = 60
user_cooldown = 600
"""


def said(prompt: str, /, **values: str | int) -> str:
    return prompts.render(f"plugins/commands/{prompt}", **values)


async def test_variables_are_filled_and_unknown_ones_kept() -> None:
    counts = iter(range(5, 10))

    async def count() -> int:
        return next(counts)

    async def uptime() -> str:
        return "1h 2m"

    values = Variables("Ada", "@bob extra", "streamer", count, uptime)
    text = "{user}>{touser} #{count} {uptime} at {channel} {random.3-3} {nope} {count}"
    assert await expand(text, values) == "Ada>bob #5 1h 2m at streamer 3 {nope} 5"
    alone = Variables("Ada", "", "c", count, uptime)
    assert await expand("{touser}", alone) == "Ada"  # no argument: the caller
    rolls = {await expand("{random.1-3}", alone) for _ in range(200)}
    assert rolls == {"1", "2", "3"}
    assert await expand("{random.9-7}", alone) in {"7", "8", "9"}
    assert await expand("no variables", alone) == "no variables"


def test_chat_definitions_and_their_options() -> None:
    got = parse_definition("-cd=5 !Socials -ul=moderator -a=!soc,links follow me", "!")
    assert got is not None
    assert (got.name, got.text, got.cooldown, got.role) == ("socials", "follow me", 5, "moderator")
    assert got.aliases == ["soc", "links"]
    plain = parse_definition("socials -5 degrees", "!")
    assert plain is not None and plain.text == "-5 degrees"  # not an option: the text
    assert parse_definition("", "!") is None
    for bad in ("-cd=soon !x y", "-ul=vip !x y", "-zz=1 !x y", "-a=Bad! !x y", "-ucd=-1 !x y"):
        with pytest.raises(BadOption):
            parse_definition(bad, "!")


async def test_file_commands_aliases_counts_and_the_role_gate() -> None:
    rig = load("commands", FILE)
    assert await rig.say("!discord") == ["Join us: example.org/discord, fan7"]
    assert await rig.say("!DC") == ["Join us: example.org/discord, fan7"]  # an alias, any case
    assert await rig.say("!server now") == ["Join us: example.org/discord, fan7"]
    assert await rig.say("!hug @bob") == ["fan7 hugs bob (1)"]
    assert await rig.say("!hug", user="8") == ["fan8 hugs fan8 (2)"]  # the counter is shared
    assert await rig.say("!unknown") == []
    assert await rig.say("discord") == []  # no prefix: an ordinary line
    assert await rig.say("!subs") == []
    assert await rig.say("!subs", roles=SUB) == ["subscribers only"]
    assert await rig.say("!subs", roles=MOD) == ["subscribers only"]
    assert await rig.say("!mods", roles=SUB) == []
    assert await rig.say("!mods", roles=frozenset({Role.OWNER})) == ["moderators only"]


async def test_cooldowns_hold_per_channel_and_per_user() -> None:
    rig = load("commands", FILE)
    assert await rig.say("!slow", user="1") == ["slow"]
    assert await rig.say("!slow", user="2") == []  # the channel's cooldown
    place = rig.plugin.services.store().for_channel("twitch", "1971641")
    await place.delete("cd:slow")  # the channel's cooldown over; the first user's is not
    assert await rig.say("!slow", user="1") == []
    assert await rig.say("!slow", user="2") == ["slow"]
    defaults = load("commands", "[plugins.commands]\n")
    moderator = "!addcom !socials follow me at {channel}"
    assert await defaults.say(moderator, roles=MOD) == [said("added", prefix="!", name="socials")]
    assert await defaults.say("!socials") == ["follow me at streamer"]
    assert await defaults.say("!socials", user="9") == []  # 30 s by default


async def test_moderators_manage_commands_in_chat_and_viewers_are_refused() -> None:
    rig = load("commands", FILE)
    assert await rig.say("!addcom !socials hi") == [said("not_allowed")]
    assert await rig.say("!addcom !socials hi") == []  # told once, not on every try
    assert await rig.say("!socials") == []
    add = "!addcom -ucd=0 -a=links !socials follow {user}"
    assert await rig.say(add, roles=MOD) == [said("added", prefix="!", name="socials")]
    assert await rig.say("!links") == ["follow fan7"]
    assert await rig.say("!addcom !socials again", roles=MOD) == [
        said("exists", prefix="!", name="socials")
    ]
    assert await rig.say("!addcom !dc x", roles=MOD) == [
        said("from_file", prefix="!", name="discord")
    ]
    assert await rig.say("!addcom -a=server !other x", roles=MOD) == [
        said("alias_taken", alias="!server")
    ]
    assert await rig.say("!addcom !commands x", roles=MOD) == [
        said("reserved", prefix="!", name="commands")
    ]
    assert await rig.say("!addcom !Bad!Name x", roles=MOD) == [said("bad_name", prefix="!")]
    assert await rig.say("!addcom", roles=MOD) == [said("usage_add", prefix="!")]
    assert await rig.say("!addcom -cd=x !a b", roles=MOD) == [said("bad_option", option="-cd=x")]
    edited = await rig.say("!editcom !links -ul=subscriber new text", roles=MOD)
    assert edited == [said("edited", prefix="!", name="socials")]
    assert await rig.say("!socials") == []  # now for subscribers
    assert await rig.say("!socials", roles=SUB) == ["new text"]
    assert await rig.say("!editcom !nothing x", roles=MOD) == [
        said("unknown", prefix="!", name="nothing")
    ]
    listed = await rig.say("!commands")
    assert listed == [said("list", commands="!discord, !hug, !mods, !slow, !socials, !subs")]
    assert await rig.say("!delcom !discord", roles=MOD) == [
        said("from_file", prefix="!", name="discord")
    ]
    assert await rig.say("!delcom socials", roles=MOD) == [
        said("deleted", prefix="!", name="socials")
    ]
    assert await rig.say("!socials", roles=SUB) == []
    assert await rig.say("!delcom !socials", roles=MOD) == [
        said("unknown", prefix="!", name="socials")
    ]
    long = "!addcom !long " + "x" * 401
    assert await rig.say(long, roles=MOD) == [said("too_long", length=401, limit=400)]


async def test_uptime_follows_the_stream_events() -> None:
    rig = load(
        "commands",
        "[plugins.commands]\n[plugins.commands.commands.up]\ntext = '{uptime}'\ncooldown = 0\n",
    )
    assert await rig.say("!up") == [said("offline")]
    went = rig.message("")
    await rig.emit("stream_online", went)
    (answer,) = await rig.say("!up")
    assert re.fullmatch(r"\d+s", answer), answer
    place = rig.plugin.services.store().for_channel("twitch", "1971641")
    await place.set(stream.STREAM, {"live": True, "since": went.sent_at.timestamp() - 3725})
    assert await rig.say("!up") == ["1h 2m"]
    await rig.emit("stream_offline", rig.message(""))
    assert await rig.say("!up") == [said("offline")]


async def test_a_custom_prefix_and_a_scope_turning_commands_off() -> None:
    toml = """
[plugins.commands]
prefix = "?"
[plugins.commands.commands.hi]
text = "hello"

[[scope]]
match = "twitch:other"
plugins.commands.enabled = false
"""
    rig = load("commands", toml)
    assert await rig.say("!hi") == []
    assert await rig.say("?hi") == ["hello"]
    quiet = rig.message("?hi", server="other")
    await rig.emit("message", quiet)
    assert len(rig.sent) == 1


@pytest.mark.parametrize(
    ("toml", "line", "expected"),
    [
        ('[plugins.commands]\nprefix = "/"\n', 2, "Twitch keeps /commands"),
        ('[plugins.commands]\nprefix = "! "\n', 2, "1-3 characters"),
        ("[plugins.commands]\ncooldown = 3\n", 2, "did you mean 'default_cooldown'"),
        ('[plugins.commands.commands.x]\ntext = "a"\nrole = "vip"\n', 3, "role"),
        ('[plugins.commands.commands.x]\ntext = "a"\ncooldown = -1\n', 3, "greater than"),
        ('[plugins.commands.commands.x]\ntext = "a"\ncolour = 1\n', 3, "colour"),
        ('[plugins.commands.commands.Bad]\ntext = "a"\n', 1, "lowercase letters"),
        (
            '[plugins.commands.commands.x]\ntext = "a"\naliases = ["y"]\n'
            '[plugins.commands.commands.y]\ntext = "b"\n',
            4,
            "'y' names two commands (x and y)",
        ),
        (
            '[plugins.commands]\n[[scope]]\nmatch = "twitch:s"\nplugins.commands.prefix = "/"\n',
            4,
            "'/' cannot",
        ),
    ],
)
def test_bad_settings_are_refused_with_their_line(toml: str, line: int, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load("commands", toml)
    message = str(info.value)
    assert f"chorus.toml:{line}:" in message, message
    assert expected in message, message


async def test_cooldowns_and_counts_hold_across_workers_on_one_redis(
    redis_client: Redis, key_tag: str
) -> None:
    toml = f"""
[plugins.commands]
[plugins.commands.commands.c{key_tag}]
text = "n={{count}}"
cooldown = 60
"""
    one = load("commands", toml, RedisPluginStore(redis_client))
    two = load("commands", toml, RedisPluginStore(redis_client))  # another worker
    tries = [
        rig.emit("message", rig.message(f"!c{key_tag}", str(i)))
        for i, rig in enumerate((one, two) * 2)
    ]
    await asyncio.gather(*tries)
    assert [t for _, t in one.sent + two.sent] == ["n=1"]  # one answer in the cooldown
    place = one.plugin.services.store().for_channel("twitch", "1971641")
    await place.delete(f"cd:c{key_tag}")
    assert await two.say(f"!c{key_tag}", user="9") == ["n=2"]  # the counter is the store's
    await place.delete(f"cd:c{key_tag}")
    await place.delete(f"count:c{key_tag}")
