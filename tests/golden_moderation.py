"""The golden case of what the ``moderation`` plugin says and gives as its reasons
(``prompts/plugins/moderation/*``), rendered by the plugin itself through the real loader and
settings, with each filter tripped once, the ladder climbed to a ban, and ``!permit``. Registered
as a case by ``tests/test_prompts_golden.py``."""

from __future__ import annotations

from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, ModerationRequest, Role
from bot.plugins.builtin import BUILTIN
from bot.plugins.builtin.moderation import check
from bot.plugins.events import EventContext
from bot.plugins.loader import Source, load_plugins
from bot.plugins.reach import Reach
from bot.settings import FileSettings, PluginSettings
from bot.state.plugin_store import MemoryPluginStore

ROOM = ConversationKey(platform="twitch", channel="streamer")
LINES = {
    "links": "cheap followers at viewers.shop",
    "caps": "WHY IS NOBODY ANSWERING MY QUESTION",
    "symbols": "$$$$$$$$$$$$$$$$$$$$$$$$",
    "emotes": "Kappa " * 9,
    "zalgo": "he\u0336\u0337\u0338llo",
}


async def moderation_texts(redis: Redis) -> str:
    file = FileSettings.model_validate({"plugins": {"moderation": {"ban": True}}})
    source = Source("moderation", BUILTIN["moderation"], "golden")
    loaded = load_plugins(PluginSettings(), sources=[source], file=file)
    out: list[str] = []

    async def send(plugin: str, where: ConversationKey, text: str, answering: object) -> None:
        out.append(f"says: {text}")

    async def moderate(request: ModerationRequest) -> None:
        if request.action != "delete":
            out.append(f"{request.action} reason: {request.reason}")

    loaded.bind(MemoryPluginStore(), Reach(send, moderate_function=moderate))
    (plugin,) = loaded.plugins
    count = 0

    async def say(text: str, user: str, *roles: Role) -> None:
        nonlocal count
        count += 1
        message = ChatMessage(
            platform="twitch",
            id=f"m{count}",
            conversation=ROOM,
            author=Author(id=user, display_name=f"fan{user}", roles=frozenset(roles)),
            text=text,
        )
        step = await check(EventContext("message", message, None, plugin.services))
        out.append(f"[{text.strip()[:40]}] -> {step or 'nothing'}")

    for number, text in enumerate(LINES.values()):
        await say(text, str(number))
    for _ in range(3):
        await say(LINES["links"], "0")  # the ladder: delete, timeout, ban
    for _ in range(3):
        await say("same words again", "9")
    for n in range(4):
        await say("a long copied line that everybody pastes", f"2{n}")
    await say("!permit", "5", Role.MODERATOR)
    await say("!permit @Fan7", "5", Role.MODERATOR)
    await say(LINES["links"], "7")
    return "\n".join(out)
