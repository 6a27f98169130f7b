"""The ``chorus`` command's configuration errors and ``chorus config``, as a real process."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from bot.cli_parser import parser, version
from bot.settings import NO_LLM_MESSAGE
from tests.test_chat_e2e import base_env, run_chorus

pytestmark = pytest.mark.e2e  # every test here starts processes


async def test_run_without_an_llm_exits_nonzero_with_one_clear_message(tmp_path: Path) -> None:
    code, out, err = await run_chorus(["run"], base_env(tmp_path), tmp_path)
    assert code == 2
    assert out == ""
    assert err.strip() == f"chorus: {NO_LLM_MESSAGE}"


async def test_unknown_provider_is_named(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {"CHORUS_MODEL": "mistral:large"}
    code, _, err = await run_chorus(["chat"], env, tmp_path, b"hi\n")
    assert code == 2
    assert "unknown provider 'mistral'" in err and "Traceback" not in err


async def test_malformed_redis_url_is_named(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {
        "CHORUS_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "k",
        "CHORUS_REDIS_URL": "redis//nope",
    }
    code, _, err = await run_chorus(["chat"], env, tmp_path, b"hi\n")
    assert code == 2
    assert "CHORUS_REDIS_URL" in err and "Traceback" not in err


async def test_unreachable_redis_is_reported_without_the_password(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {
        "CHORUS_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "k",
        "CHORUS_REDIS_URL": "redis://:pw-s3cret-xyz@127.0.0.1:1/0",
    }
    code, _, err = await run_chorus(["chat"], env, tmp_path, b"hi\n")
    assert code == 2
    assert "CHORUS_REDIS_URL" in err and "pw-s3cret-xyz" not in err and "Traceback" not in err


async def test_config_masks_secrets_and_lists_what_is_missing(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {
        "ANTHROPIC_API_KEY": "sk-ant-supersecret-abcd1234",
        "CHORUS_REDIS_URL": "redis://:redispass99@127.0.0.1:6379/0",
    }
    code, out, err = await run_chorus(["config"], env, tmp_path)
    assert code == 0, err
    assert "supersecret" not in out and "redispass99" not in out
    assert "****1234" in out
    assert "anthropic:claude-sonnet-4-5" in out  # inferred from the one configured vendor
    code, out, _ = await run_chorus(["config"], base_env(tmp_path), tmp_path)
    assert code == 0
    assert "Missing:" in out and "CHORUS_MODEL" in out
    assert "memory://  (embedded in-process store, forgotten at exit)" in out


async def test_config_says_where_the_default_store_keeps_its_data(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {"CHORUS_DATA_DIR": str(tmp_path / "data")}
    del env["CHORUS_REDIS_URL"]
    code, out, err = await run_chorus(["config"], env, tmp_path)
    assert code == 0, err
    assert f"embedded://  (embedded in-process store, kept in {tmp_path / 'data' / 'state'})" in out


TRACE = Path(__file__).resolve().parent.parent / "bench" / "traces" / "busy_chat.jsonl"


async def test_replay_reports_the_shipped_busy_trace(tmp_path: Path) -> None:
    trace = TRACE
    code, out, err = await run_chorus(["replay", str(trace)], base_env(tmp_path), tmp_path)
    assert code == 0, err
    assert "mentions answered" in out.lower() and "| twitch |" in out


async def test_replay_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = await run_chorus(["replay", "nope.jsonl"], base_env(tmp_path), tmp_path)
    assert code == 2 and "cannot read nope.jsonl" in err


async def test_version_and_every_subcommand_help_shows_an_example(tmp_path: Path) -> None:
    code, out, err = await run_chorus(["--version"], base_env(tmp_path), tmp_path)
    assert code == 0 and out.strip() == f"chorus {version()}", err
    assert re.fullmatch(r"chorus \d+\.\d+\.\d+\S*", out.strip())
    code, out, _ = await run_chorus(["chat", "--help"], base_env(tmp_path), tmp_path)
    assert code == 0 and "--verbose" in out and "examples:" in out
    top = parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, argparse.ArgumentParser] = action.choices
    assert set(commands) == {
        "run",
        "chat",
        "insights",
        "replay",
        "config",
        "reload",
        "plugins",
        "init",
        "knowledge",
        "auth",
        "admin",
        "twitch",
        "overlay",
    }
    for name, sub in commands.items():
        text = sub.format_help()
        assert "examples:" in text and f"chorus {name}" in text.split("examples:")[1], name
