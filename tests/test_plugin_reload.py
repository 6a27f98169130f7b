"""``chorus reload`` compiles a changed plugin from its file as it is now, never from Python's
bytecode cache, which judges itself current by the file's size and its mtime in whole seconds:
an edit of the same size within the second of the last import must still be taken."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bot.events import Author, ChatMessage, ConversationKey
from bot.plugins.loader import load_plugins
from bot.plugins.reload import reload_plugins
from bot.plugins.runtime import command_handler
from bot.settings import settings_from

PLUGIN = '''
from bot.plugins import CommandContext, command


@command
async def version(ctx: CommandContext) -> str:
    """Which version of the plugin answers."""
    return "{answer}"
'''


def _message() -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel="c1"),
        author=Author(id="u1", display_name="Ann"),
        text="/version",
    )


async def test_an_edit_of_the_same_size_in_the_same_second_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"same_size_{tmp_path.name.replace('-', '_')}"
    source = tmp_path / f"{name}.py"
    source.write_text(PLUGIN.format(answer="version 1"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as `chorus run` imports it
    monkeypatch.delitem(sys.modules, name, raising=False)
    settings = settings_from({"CHORUS_PLUGINS": name})
    loaded = load_plugins(settings.plugins, file=settings.file, variables=settings.variable)
    (first,) = loaded.commands
    assert await command_handler(first)(_message(), "") == "version 1"
    assert list((tmp_path / "__pycache__").glob(f"{name}.*.pyc"))  # the cache the import wrote

    before = source.stat()
    source.write_text(PLUGIN.format(answer="version 2"))  # the same size...
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))  # ...and the same mtime
    assert source.stat().st_size == before.st_size

    done = reload_plugins(loaded, settings.file, settings.variable)
    assert done.failed == {}
    (second,) = loaded.commands
    assert await command_handler(second)(_message(), "") == "version 2"
