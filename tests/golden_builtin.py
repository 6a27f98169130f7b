"""The golden case of what the ``commands`` built-in says in chat (``prompts/plugins/commands/*``),
rendered by its real handler: a moderator and a viewer managing, listing and running commands.
Registered as a case by ``tests/test_prompts_golden.py``."""

from __future__ import annotations

from redis.asyncio import Redis

from bot.events import Role
from tests.builtin_rig import load

MOD = frozenset({Role.MODERATOR})
FILE = """
[plugins.commands]
default_cooldown = 0
max_commands = 2
max_length = 24

[plugins.commands.commands.discord]
text = "Join the server, {user}"

[plugins.commands.commands.up]
text = "Live for {uptime}"
"""
SCRIPT: tuple[tuple[str, bool], ...] = (
    ("!commands", False),
    ("!addcom !socials follow me", False),
    ("!addcom", True),
    ("!addcom !socials", True),
    ("!addcom -ul=vip !socials follow me", True),
    ("!addcom !Bad!Name hi", True),
    ("!addcom !commands hi", True),
    ("!addcom !discord hi", True),
    ("!addcom -a=discord !socials follow me", True),
    ("!addcom !socials " + "x" * 25, True),
    ("!addcom !socials follow me at {channel}", True),
    ("!addcom !socials again", True),
    ("!addcom !second hi", True),
    ("!addcom !third hi", True),
    ("!editcom", True),
    ("!editcom !nothing hi", True),
    ("!editcom !socials -cd=60", True),
    ("!delcom", True),
    ("!delcom !second", True),
    ("!commands", False),
    ("!socials", False),
    ("!up", False),
)


async def commands_plugin(redis: Redis) -> str:
    empty = load("commands", "[plugins.commands]\n")
    lines = [f"viewer: !commands (none yet)\n  -> {' | '.join(await empty.say('!commands'))}"]
    rig = load("commands", FILE)
    for said, moderator in SCRIPT:
        who = "moderator" if moderator else "viewer"
        answers = await rig.say(said, roles=MOD if moderator else frozenset())
        lines.append(f"{who}: {said}\n  -> {' | '.join(answers) or '(nothing)'}")
    return "\n".join(lines)


CASES = {"builtin_commands": commands_plugin}
