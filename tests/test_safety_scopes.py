"""Per-scope safety and quotas (``[scope.safety]``, ``[scope.quota]`` in chorus.toml): how a
scope's keys become its policy (``Policies.scoped``), resolution through the router's scope
profile (most specific scope wins per key, the deployment's lists always apply), the gate and
the moderators' commands over a real Redis, and bad input refused at load with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

import prompts
from bot.events import Author, ChatMessage, ConversationKey
from bot.llm.scripted import ScriptedProvider
from bot.router.scoping import Scoping
from bot.safety.gate import SafetyGate
from bot.safety.policy import Policies
from bot.settings import ConfigError, Settings, load_settings
from tests.safety_rig import safety_rig

ENV = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0001", "CHORUS_MODEL": "anthropic:claude-test"}
GUILD, STRICT, LOOSE = "111111111111111111", "222222222222222222", "333333333333333333"
TOML = f"""
[[scope]]
match = "discord:{GUILD}"
[scope.safety]
words = ["glorp"]
blocked_users = ["troll"]
[scope.quota]
user_messages_hour = 9

[[scope]]
match = "discord:{GUILD}/{STRICT}"
[scope.safety]
words = ["zorblax"]
patterns = ["fo+bar"]
links = "domains"
link_domains = ["example.com"]
allowed_users = ["friend"]
moderation_model = false
[scope.quota]
user_messages_hour = 2

[[scope]]
match = "twitch:quietcast"
[scope.safety]
preset = "standard"
"""


def settings_with(toml: str, **env: str) -> Settings:
    Path("chorus.toml").write_text(toml.lstrip("\n"), encoding="utf-8")
    return load_settings(environ=ENV | env, warn=False)


def message(
    channel: str, text: str, *, user: str = "ada", platform: str = "discord"
) -> ChatMessage:
    server = GUILD if platform == "discord" else channel
    return ChatMessage(
        platform=platform,
        id=f"m-{channel}-{text[:8]}",
        conversation=ConversationKey(platform=platform, channel=channel),
        server=server,
        author=Author(id=user, display_name=user.title(), roles=frozenset()),
        text=text,
        is_direct=True,
    )


def scoped_gate(settings: Settings) -> SafetyGate:
    """The gate wired to a Scoping as the composition root wires it (bot/app.py)."""
    policies = Policies(settings.safety, settings.quota)
    scoping = Scoping(settings, provider=ScriptedProvider(), policies=policies)
    return SafetyGate(policies, scope_of=lambda m: scoping.profile(m).safety)


def test_each_channel_gets_its_scopes_rules_and_the_most_specific_scope_wins() -> None:
    gate = scoped_gate(
        settings_with(
            TOML, CHORUS_MODERATION_MODEL="openai:omni-moderation-latest", OPENAI_API_KEY="sk-x"
        )
    )
    strict, loose = message(STRICT, "x"), message(LOOSE, "x")
    strict_policy, loose_policy = gate.policy(strict), gate.policy(loose)
    # words: the channel's list replaces its server's; the shipped lists apply everywhere
    assert strict_policy.screen("a zorblax here") is not None
    assert loose_policy.screen("a zorblax here") is None
    assert loose_policy.screen("a glorp here") is not None
    assert strict_policy.screen("a glorp here") is None
    assert strict_policy.screen("foooobar!") is not None and loose_policy.screen("foooobar") is None
    # links: only example.com in the strict channel; anything elsewhere (standard preset)
    assert strict_policy.screen("see https://evil.test.io/x") is not None
    assert strict_policy.screen("see https://docs.example.com/x") is None
    assert loose_policy.screen("see https://evil.test.io/x") is None
    # users: the server's block list holds in both channels, the channel's allow list in one
    assert gate.status(strict, "troll", strict_policy) == "block"
    assert gate.status(loose, "troll", loose_policy) == "block"
    assert gate.status(strict, "friend", strict_policy) == "allow"
    assert gate.status(loose, "friend", loose_policy) is None
    # quotas and the moderation model
    assert strict_policy.quota.user_messages_hour == 2
    assert loose_policy.quota.user_messages_hour == 9
    assert not strict_policy.use_model and loose_policy.use_model
    # another server's channel: the deployment's rules
    other = message("444444444444444444", "x").model_copy(update={"server": "5" * 18})
    assert gate.policy(other).quota.user_messages_hour is None
    assert gate.policy(other).screen("a glorp") is None


def test_a_scope_preset_beats_the_deployments_rule_by_platform() -> None:
    gate = scoped_gate(settings_with(TOML, CHORUS_SAFETY_PRESET="streamer"))
    quiet = message("quietcast", "x", platform="twitch")
    loud = message("loudcast", "x", platform="twitch")
    assert gate.policy(loud).preset == "streamer"
    assert gate.policy(loud).screen("visit example.com now") is not None
    assert gate.policy(quiet).preset == "standard"
    assert gate.policy(quiet).screen("visit example.com now") is None


def test_a_scope_compiles_once_per_profile_and_shares_the_deployments_lists() -> None:
    settings = settings_with(TOML)
    policies = Policies(settings.safety, settings.quota)
    scoping = Scoping(settings, provider=ScriptedProvider(), policies=policies)
    first = scoping.profile(message(STRICT, "a"))
    assert scoping.profile(message(STRICT, "b")).safety is first.safety  # cached, not rebuilt
    server = scoping.profile(message(LOOSE, "c")).safety
    assert server is not None and server is not first.safety
    assert scoping.default.safety is policies.default  # no keys: the deployment's, shared
    assert policies.scoped({}) is policies.default


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('patterns = ["ok", "fo(bar"]', "safety.patterns: invalid regular expression 'fo(bar'"),
        ('blocked_users = ["discord:1"]', "safety.blocked_users: 'discord:1' is not a user id"),
        ('link_domains = ["not a domain"]', "'not a domain' is not a domain name"),
        ('links = "sometimes"', "safety.links: Input should be 'allow', 'deny' or 'domains'"),
        ('word = ["x"]', "safety.word: unknown key; did you mean 'words'?"),
    ],
)
def test_bad_scope_safety_is_refused_at_load_with_its_line_and_key(
    table: str, problem: str
) -> None:
    toml = f'[[scope]]\nmatch = "twitch:somecast"\n[scope.safety]\n{table}\n'
    Path("chorus.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(environ=ENV, warn=False)
    assert "chorus.toml:4: [[scope]] #1: " in str(info.value)
    assert problem in str(info.value)


def test_a_scope_quota_refuses_a_limit_below_one_and_has_no_cost_cap() -> None:
    head = '[[scope]]\nmatch = "twitch:a"\n[scope.quota]\n'
    Path("chorus.toml").write_text(head + "user_messages_hour = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(environ=ENV, warn=False)
    assert "chorus.toml:4: [[scope]] #1: quota.user_messages_hour: Input should be greater" in str(
        info.value
    )
    Path("chorus.toml").write_text(head + "cost_usd_per_day = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(environ=ENV, warn=False)
    assert "chorus.toml:4: [[scope]] #1: quota.cost_usd_per_day: unknown key" in str(info.value)


def test_a_scope_cannot_turn_on_a_moderation_model_nobody_configured() -> None:
    settings = settings_with(
        '[[scope]]\nmatch = "twitch:a"\n[scope.safety]\nmoderation_model = true\n'
    )
    with pytest.raises(ConfigError) as info:
        Scoping(settings, provider=ScriptedProvider(), policies=Policies(settings.safety))
    assert "chorus.toml:1: [[scope]] 'twitch:a'" in str(info.value)
    assert "CHORUS_MODERATION_MODEL" in str(info.value)


def test_a_reload_with_a_bad_pattern_keeps_the_running_rules() -> None:
    settings = settings_with(TOML)
    policies = Policies(settings.safety, settings.quota)
    scoping = Scoping(settings, provider=ScriptedProvider(), policies=policies)
    Path("chorus.toml").write_text(TOML.replace("fo+bar", "fo(bar").lstrip("\n"), "utf-8")
    with pytest.raises(ConfigError):
        scoping.reload(load_settings(environ=ENV, warn=False))
    strict = scoping.profile(message(STRICT, "x")).safety
    assert strict is not None and policies.safety_for(
        message(STRICT, "x").conversation, strict
    ).screen("foobar")


async def test_commands_write_the_channel_and_show_the_scopes_lists(
    redis_url: str, key_tag: str
) -> None:
    """``/block`` writes the channel's list (the narrowest scope); the listing shows what
    chorus.toml's scope holds too, and ``/unblock`` of a user blocked there says it stays."""
    settings = settings_with(
        '[[scope]]\nmatch = "discord"\n[scope.safety]\nblocked_users = ["troll-' + key_tag + '"]\n'
    )
    async with safety_rig(redis_url, key_tag) as rig:
        policies = Policies(settings.safety, settings.quota)
        scoping = Scoping(settings, provider=ScriptedProvider(), policies=policies)
        rig.gate.policies = policies
        rig.gate.scope_of = lambda m: scoping.profile(m).safety
        assert await rig.say("hello", user="troll") == []  # blocked by the scope: ignored
        (listing,) = await rig.say("/block", mod=True)
        assert f"troll-{key_tag}" in listing
        assert listing.startswith(prompts.render("safety/users_none", command="block"))
        (said,) = await rig.say(f"/unblock id:troll-{key_tag}", mod=True)
        assert said == prompts.render("safety/config_blocked", name=f"id:troll-{key_tag}")
        (done,) = await rig.say(f"/block id:bob-{key_tag}", mod=True)
        assert done == prompts.render("safety/block_done", name=f"id:bob-{key_tag}")
        stored = await rig.redis.hgetall(_users_key(rig))
        assert stored == {f"bob-{key_tag}": "block"}


def _users_key(rig: object) -> str:
    from bot.state import keys

    conv = rig.conv()  # type: ignore[attr-defined]
    return keys.safety_users(conv.platform, conv.channel)


def test_the_documented_example_loads_and_means_what_it_says() -> None:
    page = (Path(__file__).parent.parent / "docs" / "safety.md").read_text(encoding="utf-8")
    block = page.split("## Per scope\n", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    gate = scoped_gate(settings_with(block))
    kids, lounge = message("223456789012345678", "x"), message("1" * 18 + "9", "x")
    kids = kids.model_copy(update={"server": "123456789012345678"})
    lounge = lounge.model_copy(update={"server": "123456789012345678"})
    strict, server = gate.policy(kids), gate.policy(lounge)
    assert strict.preset == "streamer" and server.preset == "standard"
    assert strict.screen("free   nitro here") and not server.screen("free nitro here")
    assert strict.screen("gore") and server.screen("spoilers") and not server.screen("gore")
    assert strict.screen("see https://example.org") and not strict.screen("en.wikipedia.org/x")
    assert not strict.use_model
    assert (strict.quota.user_messages_hour, server.quota.user_messages_hour) == (5, 30)
    assert not strict.quota.exempt_moderators and server.quota.exempt_moderators
    assert gate.status(kids, "998877665544332211", strict) == "block"
    twitch = gate.policy(message("yourchannel", "x", platform="twitch"))
    assert twitch.preset == "standard" and not twitch.fail_closed


async def test_a_scope_block_beats_a_moderators_allow_and_a_channel_entry_beats_scope_trust(
    redis_url: str, key_tag: str
) -> None:
    settings = settings_with(
        '[[scope]]\nmatch = "discord"\n[scope.safety]\n'
        f'blocked_users = ["troll-{key_tag}"]\nallowed_users = ["bo-{key_tag}"]\n'
    )
    async with safety_rig(redis_url, key_tag) as rig:
        policies = Policies(settings.safety, settings.quota)
        scoping = Scoping(settings, provider=ScriptedProvider(), policies=policies)
        rig.gate.policies = policies
        rig.gate.scope_of = lambda m: scoping.profile(m).safety
        await rig.say(f"/allow id:troll-{key_tag}", mod=True)
        await rig.say(f"/block id:bo-{key_tag}", mod=True)
        troll, bo = rig.message("x", user="troll"), rig.message("x", user="bo")
        policy = rig.gate.policy(troll)
        assert rig.gate.status(troll, troll.author.id, policy) == "block"
        assert rig.gate.status(bo, bo.author.id, policy) == "block"
        assert await rig.say("hello", user="bo") == []


def test_a_reload_applies_a_scopes_new_lists_without_a_restart() -> None:
    settings = settings_with(TOML)
    policies = Policies(settings.safety, settings.quota)
    scoping = Scoping(settings, provider=ScriptedProvider(), policies=policies)
    gate = SafetyGate(policies, scope_of=lambda m: scoping.profile(m).safety)
    strict = message(STRICT, "x")
    assert gate.policy(strict).screen("a frobnicate") is None
    Path("chorus.toml").write_text(TOML.replace('"zorblax"', '"frobnicate"').lstrip("\n"), "utf-8")
    scoping.reload(load_settings(environ=ENV, warn=False))
    assert gate.policy(strict).screen("a frobnicate") is not None
    assert gate.policy(strict).screen("a zorblax") is None
