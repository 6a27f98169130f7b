"""What ``chorus init`` says once the files are written, and the defaults a newcomer meets.

Real processes against loopback servers: the Discord invite (``client_id``, ``scope``,
``permissions``) and the Message Content intent read from the application's flags; the
dashboard's generated token (in ``.env``, never printed); the closing commands run exactly as
printed; ``.env.example`` with only ``OPENAI_API_KEY`` filled in answers; no model at all names
``chorus init`` first.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from bot.onboarding import files, finish
from bot.settings import Settings
from tests.loopback.discord_server import DiscordServer
from tests.loopback.openai_server import OpenAIServer
from tests.test_chat_e2e import ROOT, base_env, run_chorus

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

# The permissions the Discord adapter needs, by Discord's documented bit numbers.
VIEW_CHANNEL, SEND_MESSAGES, READ_MESSAGE_HISTORY, SEND_IN_THREADS = 10, 11, 16, 38


def invite(out: str) -> dict[str, list[str]]:
    found = re.search(r"(https://discord\.com/oauth2/authorize\?\S+)", out)
    assert found, out
    return parse_qs(urlsplit(found[1]).query)


async def test_init_for_discord_prints_the_invite_and_the_intent(tmp_path: Path) -> None:
    async with DiscordServer() as discord, OpenAIServer() as model:
        env = base_env(tmp_path) | {
            "DISCORD_API_BASE_URL": discord.api_url,
            "OPENAI_BASE_URL": model.base_url,
        }
        flags = ["init", "--vendor", "openai", "--api-key", "K", "--platforms", "discord"]
        code, out, err = await run_chorus([*flags, "--discord-token", "T"], env, tmp_path)
        assert code == 0, err
        application_id = discord.ready["d"]["application"]["id"]
        query = invite(out)
        assert query["client_id"] == [str(application_id)]
        assert query["scope"] == ["bot applications.commands"]
        bits = (VIEW_CHANNEL, SEND_MESSAGES, READ_MESSAGE_HISTORY, SEND_IN_THREADS)
        assert query["permissions"] == [str(sum(1 << bit for bit in bits))]
        for name in ("View Channels", "Send Messages", "Read Message History", "Threads"):
            assert name in out
        assert "The Message Content intent is off" in out
        assert "Developer Portal -> Bot -> Privileged Gateway Intents" in out
        (app_request,) = discord.requests_to("GET", "/applications/@me")
        assert app_request.headers["authorization"] == "Bot T"

        discord.application_flags = 1 << 18  # GATEWAY_MESSAGE_CONTENT
        code, out, err = await run_chorus(
            [*flags, "--discord-token", "T", "--force"], env, tmp_path
        )
        assert code == 0 and "The Message Content intent is on" in out, err
        discord.application_flags = 1 << 19  # ..._LIMITED: an unverified bot, also on
        code, out, err = await run_chorus(
            [*flags, "--discord-token", "T", "--force"], env, tmp_path
        )
        assert code == 0 and "The Message Content intent is on" in out, err

        discord.application_down = True  # no invite, said so; the files are written all the same
        again = [*flags, "--discord-token", "T", "--force"]
        code, out, err = await run_chorus(again, env, tmp_path)
        assert code == 0, err
        assert "Could not read the bot's application from Discord (Discord answered 500" in out
        assert "OAuth2 -> URL Generator" in out and "oauth2/authorize" not in out


async def test_the_dashboard_and_the_closing_commands_work_as_printed(tmp_path: Path) -> None:
    async with OpenAIServer() as model:
        env = base_env(tmp_path) | {"OPENAI_BASE_URL": model.base_url}
        flags = ["init", "--vendor=openai", "--api-key=sk-test", "--platforms=", "--dashboard"]
        code, out, err = await run_chorus(flags, env, tmp_path)
        assert code == 0, err
        written = dict(
            line.split("=", 1)
            for line in (tmp_path / ".env").read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        assert written["CHORUS_ADMIN_PORT"] == "8470" and len(written["CHORUS_ADMIN_TOKEN"]) >= 32
        assert written["CHORUS_ADMIN_TOKEN"] not in out + err
        assert "http://127.0.0.1:8470/" in out and "CHORUS_ADMIN_TOKEN" in out
        assert "State: " in out and "CHORUS_DATA_DIR" in out
        (chat_line,) = [line for line in out.splitlines() if line.endswith("in this terminal")]
        command = chat_line.split("    ")[0].strip()
        assert command == f"{sys.executable} -m bot.cli chat"  # how this chorus was started
        model.replies.append("Hello from the printed command.")
        shell = await asyncio.create_subprocess_shell(
            command,
            cwd=tmp_path,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out_bytes, err_bytes = await asyncio.wait_for(shell.communicate(b"hello\n"), 120)
        assert shell.returncode == 0, err_bytes.decode()[-3000:]
        assert out_bytes.decode().strip() == "Hello from the printed command."


def test_the_command_is_spelled_as_chorus_was_started(tmp_path: Path) -> None:
    venv_chorus = tmp_path / ".venv" / "bin" / "chorus"
    venv_chorus.parent.mkdir(parents=True)
    venv_chorus.write_text("#!/bin/sh\n")
    venv_chorus.chmod(0o755)
    assert finish.command(tmp_path, str(venv_chorus)) == ".venv/bin/chorus"
    assert finish.command(tmp_path / "elsewhere", str(venv_chorus)) == str(venv_chorus)
    on_path = shutil.which("chorus")
    if on_path is not None:  # the suite's venv is on PATH when it is activated
        assert finish.command(tmp_path, on_path) == "chorus"
    python = tmp_path / "py"
    assert finish.command(tmp_path, "/x/bot/cli.py", str(python)) == "py -m bot.cli"


def test_files_written_elsewhere_get_a_cd_and_absolute_commands(tmp_path: Path) -> None:
    target = tmp_path / "bot dir"
    text = finish.closing(target, {}, ["twitch"], Settings(), checked=False, cwd=tmp_path)
    python = sys.executable  # pytest runs as python -m pytest: chorus would be python -m bot.cli
    cd = f"cd '{target}'"
    assert f"`{cd} && {python} -m bot.cli auth twitch` now" in text
    assert f"Next:\n  {cd}\n  {python} -m bot.cli chat " in text
    here = finish.closing(tmp_path, {}, [], Settings(), checked=False, cwd=tmp_path)
    assert "cd " not in here and "start it on the console" in here


def test_update_env_keeps_every_other_line_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text("# notes\nA=1\nexport TOKEN=old\nB=2\nTOKEN=dup\n")
    path.chmod(0o644)
    files.update_env(path, {"TOKEN": "new value", "C": "3"})
    assert path.read_text() == '# notes\nA=1\nTOKEN="new value"\nB=2\nC=3\n'
    assert path.stat().st_mode & 0o777 == 0o600
    files.update_env(tmp_path / "fresh.env", {"X": "y"})
    assert (tmp_path / "fresh.env").read_text().splitlines()[-1] == "X=y"


async def test_env_example_with_only_an_openai_key_answers(tmp_path: Path) -> None:
    example = (ROOT / ".env.example").read_text()
    assert re.search(r"^CHORUS_MODEL=$", example, re.MULTILINE), "the example sets a model"
    (tmp_path / ".env").write_text(
        re.sub(r"^OPENAI_API_KEY=$", "OPENAI_API_KEY=sk-only-this", example, flags=re.MULTILINE)
    )
    async with OpenAIServer() as model:
        model.replies.append("Inferred and answering.")
        env = base_env(tmp_path) | {"OPENAI_BASE_URL": model.base_url}
        code, out, err = await run_chorus(["chat"], env, tmp_path, b"hello\n")
    assert code == 0, err[-3000:]
    assert out.strip() == "Inferred and answering."
    (request,) = model.requests
    assert request.body["model"] == "gpt-4.1-mini"


async def test_make_run_with_only_an_openai_key_in_dotenv_opens_the_console(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-only-this\n")
    async with OpenAIServer() as model:
        model.replies.append("Console here.")
        env = base_env(tmp_path) | {"OPENAI_BASE_URL": model.base_url}
        code, out, err = await run_chorus(["run"], env, tmp_path, b"hello\n")  # what make runs
    assert code == 0, err[-3000:]
    assert out.strip() == "Console here."
    (request,) = model.requests
    assert request.body["model"] == "gpt-4.1-mini"
    assert request.headers["authorization"] == "Bearer sk-only-this"


async def test_no_model_at_all_names_chorus_init_first(tmp_path: Path) -> None:
    env = {k: v for k, v in base_env(tmp_path).items() if not k.endswith("_API_KEY")}
    code, _, err = await run_chorus(["run"], env, tmp_path)
    assert code == 2
    first = err.strip().splitlines()[0]
    assert "No LLM is configured. Run `chorus init`" in first, err
