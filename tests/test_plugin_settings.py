"""A plugin's own settings: ``[plugins.NAME]`` in ``chorus.toml``, ``[scope.plugins.NAME]`` per
place, secrets from the environment only; every bad key or value refused with its file and line,
as the rest of the file is."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.events import Author, ChatMessage, ConversationKey
from bot.plugins.loader import LoadedPlugins, Source, load_plugins
from bot.plugins.reload import reload_plugins
from bot.plugins.runtime import command_handler
from bot.settings import ConfigError, Settings, load_settings
from bot.state.plugin_store import MemoryPluginStore
from tests.plugin_samples.configured import GreetSettings

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0001"}
NAME = "greeter"
SOURCE = Source(NAME, "tests.plugin_samples.configured", "test")
GUILD, CHANNEL = "111111111111111111", "222222222222222222"


def configured(text: str, environ: dict[str, str] | None = None) -> tuple[Settings, LoadedPlugins]:
    Path("chorus.toml").write_text(text.lstrip("\n"), encoding="utf-8")
    settings = load_settings(environ=KEYS | (environ or {}), warn=False)
    loaded = load_plugins(
        settings.plugins, sources=[SOURCE], file=settings.file, variables=settings.variable
    )
    loaded.bind(MemoryPluginStore())
    return settings, loaded


def refused(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        configured(text, environ)
    return str(info.value)


def message(channel: str, server: str | None, user: str = "7") -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m{channel}{user}",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id=user, display_name="ada"),
        text="/greet",
        server=server,
    )


FILE = f"""
[plugins]
modules = ["tests.plugin_samples.configured"]

[plugins.greeter]
greeting = "hi"
limit = 2

[[scope]]
match = "discord:{GUILD}"
plugins.greeter.greeting = "hello, guild"

[[scope]]
match = "discord:{GUILD}/{CHANNEL}"

[scope.plugins.greeter]
limit = 5
"""


async def test_settings_come_from_the_file_and_the_most_specific_scope() -> None:
    settings, loaded = configured(FILE, {"GREET_TOKEN": "tok-secret-1234"})
    assert settings.plugins.modules == ("tests.plugin_samples.configured",)
    (plugin,) = loaded.plugins
    services = plugin.services
    base = services.settings(GreetSettings)
    assert (base.greeting, base.limit) == ("hi", 2)
    assert base.token is not None and base.token.get_secret_value() == "tok-secret-1234"
    guild = services.settings(GreetSettings, message("333", GUILD))
    assert (guild.greeting, guild.limit) == ("hello, guild", 2)
    here = services.settings(GreetSettings, message(CHANNEL, GUILD))
    assert (here.greeting, here.limit) == ("hello, guild", 5)
    elsewhere = services.settings(GreetSettings, message("444", "999999999999999999"))
    assert (elsewhere.greeting, elsewhere.limit) == ("hi", 2)
    handler = command_handler(plugin.commands[0], services)
    answers = [await handler(message(CHANNEL, GUILD), "") for _ in range(6)]
    assert answers == [f"hello, guild x{n}" for n in (1, 2, 3, 4, 5, 5)]
    assert await handler(message("333", None), "") == "hi x2"  # the same user, capped at 2
    assert services.config is not None
    shown = services.config.shown()
    assert shown["token"] == "*** (GREET_TOKEN, set)" and "tok-secret" not in str(shown)


def test_without_a_table_the_defaults_hold_and_the_top_level_list_still_works() -> None:
    _, loaded = configured('plugins = ["tests.plugin_samples.configured"]\n')
    base = loaded.plugins[0].services.settings(GreetSettings)
    assert (base.greeting, base.limit, base.token) == ("hello", 3, None)


def test_an_unknown_key_names_its_line_and_the_closest_valid_one() -> None:
    error = refused('[plugins.greeter]\ngreeting = "x"\nlimt = 2\n')
    assert f"{Path('chorus.toml').absolute()}:3: plugins.greeter.limt: unknown key; " in error
    assert "did you mean 'limit'?" in error


def test_a_bad_value_names_its_line_in_the_table_and_in_a_scope() -> None:
    error = refused(
        f'[plugins.greeter]\nlimit = 0\n\n[[scope]]\nmatch = "discord:{GUILD}"\n'
        'plugins.greeter.limit = "many"\n'
    )
    path = Path("chorus.toml").absolute()
    assert f"{path}:2: plugins.greeter.limit: Input should be greater than or equal to 1" in error
    assert f"{path}:6: [[scope]] 'discord:{GUILD}': plugins.greeter.limit: Input should be" in error


def test_a_secret_in_the_file_is_refused_with_the_variable_to_use() -> None:
    error = refused('[plugins.greeter]\ntoken = "oops"\n')
    assert ":2: plugins.greeter.token: is a secret: set GREET_TOKEN in the environment" in error
    assert "oops" not in error


def test_a_table_for_a_plugin_that_is_not_loaded_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    configured("[plugins.nobody]\nx = 1\n")
    assert any(
        "settings for a plugin that is not loaded" in r.message and r.__dict__["plugin"] == "nobody"
        for r in caplog.records
    )


def test_the_section_own_keys_are_still_checked() -> None:
    Path("chorus.toml").write_text("[plugins]\nhook_timout = 3\n")
    with pytest.raises(ConfigError, match="hook_timout: unknown key; did you mean 'hook_timeout'"):
        load_settings(environ=KEYS, warn=False)


def test_a_reload_takes_new_settings_and_a_bad_one_keeps_the_running_ones() -> None:
    settings, loaded = configured('[plugins.greeter]\ngreeting = "one"\n')
    services = loaded.plugins[0].services
    Path("chorus.toml").write_text('[plugins.greeter]\ngreeting = "two"\n')
    changed = load_settings(environ=KEYS, warn=False)
    done = reload_plugins(loaded, changed.file, changed.variable)
    assert done.reconfigured == [NAME] and not done.failed and not done.swapped
    assert services.settings(GreetSettings).greeting == "two"
    Path("chorus.toml").write_text("[plugins.greeter]\nlimit = 99\n")
    broken = load_settings(environ=KEYS, warn=False)
    done = reload_plugins(loaded, broken.file, broken.variable)
    assert (
        ":2: plugins.greeter.limit: Input should be less than or equal to 10" in done.failed[NAME]
    )
    assert services.settings(GreetSettings).greeting == "two"  # the running settings stay
    assert settings.file.found is not None
