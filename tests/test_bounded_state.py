"""Nothing kept in process memory per channel or user grows without a bound.

A bot in thousands of Discord servers sees an unbounded stream of channels; each piece of
per-channel state a process keeps must have a cap and evict (issue: a smaller footprint). The
other per-conversation caches carry their own tests next to their modules; this file holds
the ones added for the footprint work.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.events import Author, ChatMessage, ConversationKey
from bot.llm.scripted import ScriptedProvider
from bot.router import scoping as scoping_module
from bot.router.scoping import Scoping
from bot.settings import load_settings

ENV = {"CHORUS_MODEL": "anthropic:claude-test", "ANTHROPIC_API_KEY": "sk-ant-test-0001"}
SERVER = "123456789012345678"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    yield


def _message(channel: str) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id=f"m-{channel}",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1", display_name="Ada"),
        text="hi",
        mentions_bot=True,
        server=SERVER,
    )


def test_the_servers_learnt_per_channel_are_bounded_and_the_recent_ones_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Path("chorus.toml").write_text(
        f'[personas.p]\nprompt = "P"\n[[scope]]\nmatch = "discord:{SERVER}"\npersona = "p"\n',
        encoding="utf-8",
    )
    monkeypatch.setattr(scoping_module, "CHANNELS_KEPT", 8)
    scoping = Scoping(load_settings(environ=ENV, warn=False), provider=ScriptedProvider())
    channels = [f"{9_000 + i}" for i in range(50)]
    for channel in channels:
        scoping.profile(_message(channel))
    assert len(scoping._servers) <= 8
    # the most recent channel is still known to be in the server: a turn the bot starts there
    # (no message at hand) resolves like that server's scope
    latest = ConversationKey(platform="discord", channel=channels[-1])
    assert scoping.for_key(latest).assembler.system_prompt.startswith("P\n")
    assert ("discord", channels[0]) not in scoping._servers  # the oldest went first
