"""``chorus.toml``: where it is found, what wins over it, and every kind of bad input named with
its file, line, key and (for an unknown key) the closest valid one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import ConfigError, load_settings

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0001"}


def write(text: str, name: str = "chorus.toml") -> Path:
    path = Path(name)  # the test's own empty working directory
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.lstrip("\n"), encoding="utf-8")
    return path


def refused(text: str, environ: dict[str, str] | None = None) -> str:
    write(text)
    with pytest.raises(ConfigError) as info:
        load_settings(environ=environ or KEYS, warn=False)
    return str(info.value)


# -- finding the file and precedence ------------------------------------------------------------
def test_chorus_toml_in_the_working_directory_fills_sections_by_field_name() -> None:
    write(
        """
[agent]
bot_name = "Ada"
max_output_tokens = 2048

[fallback]
models = ["openai:gpt-x", "gemini:g"]

[tools]
tools_disabled = ["fetch_page"]
"""
    )
    settings = load_settings(environ=KEYS, warn=False)
    assert settings.agent.bot_name == "Ada" and settings.agent.max_output_tokens == 2048
    assert settings.fallback.models == "openai:gpt-x,gemini:g"  # a list for a comma text
    assert settings.tools.tools_disabled == frozenset({"fetch_page"})
    assert settings.file.found == Path("chorus.toml").absolute()
    assert settings.origin("agent", "bot_name") == f"{Path('chorus.toml').absolute()}:2"
    assert settings.origin("agent", "vision") == "default"


def test_environment_beats_dotenv_beats_the_file_beats_the_defaults() -> None:
    write('[agent]\nbot_name = "File"\nmax_output_tokens = 10\nmax_message_chars = 20\n')
    Path(".env").write_text("CHORUS_BOT_NAME=DotEnv\nCHORUS_MAX_OUTPUT_TOKENS=11\n")
    settings = load_settings(environ=KEYS | {"CHORUS_BOT_NAME": "Env"}, warn=False)
    agent = settings.agent
    assert (agent.bot_name, agent.max_output_tokens, agent.max_message_chars) == ("Env", 11, 20)
    assert agent.max_tool_iterations == 24
    assert settings.origin("agent", "bot_name") == "the environment (CHORUS_BOT_NAME)"
    assert settings.origin("agent", "max_output_tokens") == ".env (CHORUS_MAX_OUTPUT_TOKENS)"
    assert settings.origin("agent", "max_message_chars").endswith("/chorus.toml:4")
    assert settings.origin("agent", "max_tool_iterations") == "default"
    assert settings.origin("llm", "anthropic_api_key") == "the environment (ANTHROPIC_API_KEY)"


def test_chorus_config_names_another_file_and_a_missing_one_is_an_error() -> None:
    write('[agent]\nbot_name = "Elsewhere"\n', "conf/bot.toml")
    write('[agent]\nbot_name = "Here"\n')
    settings = load_settings(environ=KEYS | {"CHORUS_CONFIG": "conf/bot.toml"}, warn=False)
    assert settings.agent.bot_name == "Elsewhere"
    with pytest.raises(ConfigError, match=r"CHORUS_CONFIG=nope.toml: no such file"):
        load_settings(environ={"CHORUS_CONFIG": "nope.toml"}, warn=False)


def test_no_file_is_fine() -> None:
    settings = load_settings(environ=KEYS, warn=False)
    assert settings.file.found is None and settings.file.scopes == ()


# -- bad input ---------------------------------------------------------------------------------
def test_unknown_keys_name_file_line_and_the_closest_valid_key() -> None:
    message = refused(
        """
[agent]
bot_nme = "Ada"

[lmm]
model = "anthropic:x"

[[scope]]
match = "discord"
tools = { enabld = ["x"] }

[scope.engagement]
mood = "ambient"

[personas.pirate]
promt = "Arr"
"""
    )
    assert "chorus.toml:2: agent.bot_nme: unknown key; did you mean 'bot_name'?" in message
    assert "chorus.toml:4: lmm: unknown key; did you mean 'llm'?" in message
    assert "chorus.toml:9: [[scope]] #1: tools.enabld: unknown key; did you mean 'enabled'?" in (
        message
    )
    assert "chorus.toml:12: [[scope]] #1: engagement.mood: unknown key; did you mean 'mode'?" in (
        message
    )
    assert "chorus.toml:15: personas.pirate.promt: unknown key; did you mean 'prompt'?" in message


def test_a_variable_name_used_as_a_key_points_to_the_field() -> None:
    message = refused('[agent]\nCHORUS_BOT_NAME = "Ada"\n')
    assert "agent.CHORUS_BOT_NAME: unknown key; did you mean 'bot_name'?" in message


def test_broken_toml_names_its_line() -> None:
    message = refused('[agent]\nbot_name = "Ada\n')
    assert message.startswith(f"{Path('chorus.toml').absolute()}:2: not valid TOML")


def test_a_bad_value_names_the_line_and_the_variable_of_that_setting() -> None:
    message = refused("[agent]\n\nmax_output_tokens = -1\n")
    assert "chorus.toml:3: agent.max_output_tokens (CHORUS_MAX_OUTPUT_TOKENS)" in message
    assert "greater than or equal to 1" in message


def test_a_missing_persona_file_names_its_path() -> None:
    message = refused('[personas.pirate]\nprompt_file = "personas/pirate.md"\n')
    expected = Path("personas/pirate.md").absolute()
    assert f"chorus.toml:2: personas.pirate.prompt_file: no such file: {expected}" in message


def test_persona_prompt_and_prompt_file_are_exclusive_and_the_file_is_read() -> None:
    message = refused('[persona]\nprompt = "a"\nprompt_file = "p.md"\n')
    assert "persona.prompt_file: give prompt or prompt_file, not both" in message
    Path("p.md").write_text("You are Ada.\n")
    write('[persona]\nprompt_file = "p.md"\nlanguage = "French"\n')
    persona = load_settings(environ=KEYS, warn=False).file.persona
    assert persona.prompt == "You are Ada.\n" and persona.prompt_file == Path("p.md").absolute()


def test_paths_in_the_file_are_relative_to_its_folder() -> None:
    write("You are Ada.", "conf/personas/ada.md")
    write('[persona]\nprompt_file = "personas/ada.md"\n', "conf/chorus.toml")
    settings = load_settings(environ=KEYS | {"CHORUS_CONFIG": "conf/chorus.toml"}, warn=False)
    assert settings.file.persona.prompt == "You are Ada."


@pytest.mark.parametrize(
    ("match", "problem"),
    [
        ("discrod:1", "unknown platform 'discrod' in match 'discrod:1'; did you mean 'discord'?"),
        ("twitch:a/b", "twitch has no servers: write twitch:CHANNEL"),
        ("discord:/2", "has an empty part"),
    ],
)
def test_a_malformed_match_is_an_error(match: str, problem: str) -> None:
    message = refused(f'[[scope]]\nmatch = "{match}"\n')
    assert "chorus.toml:2: [[scope]] #1: match:" in message and problem in message


def test_what_the_keys_cannot_say_alone_is_checked_with_each_line() -> None:
    message = refused(
        """
[personas.pirate]
prompt = "Arr"

[[scope]]
match = "discord:1"
persona = "pirat"

[[scope]]
match = "discord:1"
model = "openai:gpt-x"

[[scope]]
match = "twitch:somechannel"
engagement = { mode = "always" }

[[scope]]
match = "youtube"
engagement.user_cooldown_seconds = -5
""",
        KEYS | {"CHORUS_INSIGHTS_ENABLED": "false"},
    )
    assert (
        "chorus.toml:6: [[scope]] 'discord:1': persona: no persona named 'pirat'; "
        "did you mean 'pirate'?" in message
    )
    assert "chorus.toml:9: [[scope]] 'discord:1': match: the same match as the scope at " in (
        message
    )
    assert "chorus.toml:10: [[scope]] 'discord:1': model: CHORUS_MODEL uses openai" in message
    assert "OPENAI_API_KEY" in message
    assert "chorus.toml:14: [[scope]] 'twitch:somechannel': engagement.mode: 'always'" in message
    assert "chorus.toml:18: [[scope]] 'youtube': engagement.user_cooldown_seconds:" in message


def test_insights_on_in_a_scope_needs_them_on_for_the_deployment() -> None:
    text = '[memory]\ninsights_enabled = false\n\n[[scope]]\nmatch = "console"\ninsights = true\n'
    assert "chorus.toml:6: [[scope]] 'console': insights: the insights worker is off" in (
        refused(text)
    )


def test_scopes_that_can_match_nothing_are_warned_about() -> None:
    write(
        """
[[scope]]
match = "slack:T1/C2"

[[scope]]
match = "discord:general"

[[scope]]
match = "discord:123456789012345678/223456789012345678"

[[scope]]
match = "twitch:notjoined"

[[scope]]
match = "twitch:joined"

[[scope]]
match = "console"
"""
    )
    env = KEYS | {
        "DISCORD_TOKEN": "t",
        "DISCORD_ALLOWED_CHANNELS": "323456789012345678",
        "TWITCH_CLIENT_ID": "c",
        "TWITCH_CHANNELS": "joined",
    }
    warnings = load_settings(environ=env, warn=False).warnings
    assert warnings == [
        "scope 'slack:T1/C2' matches nothing: slack is not configured",
        "scope 'discord:general' matches nothing: 'general' is not an id (a snowflake (digits))",
        "scope 'discord:123456789012345678/223456789012345678' matches nothing: its channel is "
        "not allowed by DISCORD_ALLOWED_CHANNELS",
        "scope 'twitch:notjoined' matches nothing: 'notjoined' is not in TWITCH_CHANNELS",
    ]


def test_a_channel_scope_that_engages_is_heard_by_its_adapter() -> None:
    write(
        """
[[scope]]
match = "discord:123456789012345678/223456789012345678"
engagement.mode = "ambient"

[[scope]]
match = "slack:T1/C2"
engagement.mode = "always"
"""
    )
    env = KEYS | {"DISCORD_AMBIENT_CHANNELS": "423456789012345678"}
    settings = load_settings(environ=env, warn=False)
    assert settings.discord.ambient_channels == {223456789012345678, 423456789012345678}
    assert settings.slack.always_answer_channels == {"C2"}


# -- chorus config --scope -----------------------------------------------------------------------
@pytest.mark.e2e
async def test_config_scope_shows_each_value_with_its_source_and_masks_secrets(
    tmp_path: Path,
) -> None:
    from tests.test_chat_e2e import base_env, run_chorus

    guild, channel = "123456789012345678", "223456789012345678"
    write(
        f"""
[agent]
bot_name = "Ada"

[personas.pirate]
prompt = "Arr."

[[scope]]
match = "discord"
reasoning = "off"

[[scope]]
match = "discord:{guild}/{channel}"
persona = "pirate"
tools.enabled = ["current_time"]
engagement.min_pending = 3
"""
    )
    env = base_env(tmp_path) | {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "sk-ant-supersecret-abcd1234",
        "CHORUS_REDIS_URL": "redis://:redispass99@127.0.0.1:6379/0",
    }
    code, out, err = await run_chorus(
        ["config", "--scope", f"discord:{guild}/{channel}"], env, tmp_path
    )
    assert code == 0, err
    scope, everything = out.split("\n\n", 1)
    rows = {line.split()[0]: line for line in scope.splitlines()[1:]}
    rows |= {line.split()[0]: line for line in everything.splitlines()[1:]}
    toml = tmp_path / "chorus.toml"
    assert f"discord ({toml}:7), discord:{guild}/{channel} ({toml}:11)" in rows["matching"]
    assert rows["persona"].split()[1:] == [
        "pirate",
        f"{toml}:13",
        "[[scope]]",
        f"discord:{guild}/{channel}",
    ]
    assert rows["reasoning"].split()[1:3] == ["off", f"{toml}:9"]
    assert rows["tools.enabled"].split()[1:3] == ["current_time", f"{toml}:14"]
    (pending,) = [line.split() for line in scope.splitlines() if "min_pending" in line]
    assert pending[1:3] == ["3", f"{toml}:15"]
    assert rows["engagement.min_gap_seconds"].split()[1:] == ["45.0", "default"]
    assert rows["model"].split()[1:] == [
        "anthropic:claude-test",
        "the",
        "environment",
        "(CHORUS_MODEL)",
    ]
    assert rows["agent.bot_name"].split()[1:] == ["Ada", f"{toml}:2"]
    assert rows["llm.anthropic_api_key"].split()[1:4] == ["set,", "****1234", "the"]
    assert "supersecret" not in out and "redispass99" not in out
    code, _, err = await run_chorus(["config", "--scope", "discrod:1"], env, tmp_path)
    assert code == 2 and "did you mean 'discord'?" in err


def test_the_shipped_example_loads_and_matches_where_its_platforms_run() -> None:
    from bot.router.scoping import personas

    example = Path(__file__).resolve().parent.parent / "chorus.example.toml"
    env = KEYS | {"DISCORD_TOKEN": "t", "TWITCH_CLIENT_ID": "c", "TWITCH_CHANNELS": "yourchannel"}
    settings = load_settings(config=example, environ=env, warn=False)
    assert settings.warnings == []
    assert [scope.match for scope in settings.file.scopes][0] == "discord"
    assert "You are Captain Byte" in personas(settings)["pirate"]


def test_the_top_level_plugins_list_fills_the_plugins_sections_modules() -> None:
    """``plugins = [...]`` is the plugins section's ``modules`` (whatever else that section
    holds is its own table); the section itself comes from the plugins feature."""
    from pydantic import Field

    from bot.settings.base import Section
    from bot.settings.file import read_config

    class Plugins(Section):
        modules: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_PLUGINS")

    path = write('plugins = ["my_plugins.weather", "acme.tools:register"]\n')
    found = read_config(path, {"plugins": Plugins})
    assert found.sections == {"plugins": {"modules": ["my_plugins.weather", "acme.tools:register"]}}
    with pytest.raises(ConfigError, match="plugins: unknown key"):
        read_config(path, {})  # a build without the plugins feature says so


def test_plugins_in_the_file_and_chorus_plugins_winning_over_them() -> None:
    write('plugins = ["my_plugins.weather", "acme.tools:register"]\n')
    settings = load_settings(environ=KEYS, warn=False)
    assert settings.plugins.modules == ("my_plugins.weather", "acme.tools:register")
    assert settings.origin("plugins", "modules").endswith("chorus.toml:1")
    settings = load_settings(environ=KEYS | {"CHORUS_PLUGINS": "only_this"}, warn=False)
    assert settings.plugins.modules == ("only_this",)
