"""``/link`` and ``/unlink``: one person across platforms (bot/memory/people.py does the work).

``/link`` alone answers with a one-time code, but only where the answer is private (a Discord or
Slack slash command, a direct message, the console): a code posted in public chat could be typed
first by anyone watching. In public chat (Twitch, YouTube, a channel) ``/link`` says where to ask
instead. ``/link <code>`` typed on another platform -- public chat is fine for that, the code is
used up by it -- links nothing yet: it names the account the code came from and asks the typer to
answer ``/link confirm`` within 2 minutes, so nobody is linked by typing a code someone else
posted without being told what it does. ``/unlink`` separates this identity from its person.
Each step, and each refused code, goes to the audit trail (direction ``link``; never the code
itself), so an operator can see who linked what and spot guessing.

Every sentence is ``prompts/commands/link_*`` and ``unlink_*``.
"""

from __future__ import annotations

import time

import prompts
from bot.events import ChatMessage
from bot.memory.buffers import MemoryStore
from bot.memory.people import CODE_ALPHABET, CODE_LENGTH, CONFIRM_SECONDS, LinkOutcome, People
from bot.router.text_commands import Command, Commands
from bot.safety.audit import Audit, AuditEntry

_REFUSALS = {
    LinkOutcome.ALREADY: "commands/link_already",
    LinkOutcome.OWN_CODE: "commands/link_own_code",
    LinkOutcome.UNKNOWN: "commands/link_unknown",
    LinkOutcome.TOO_MANY: "commands/link_too_many",
    LinkOutcome.EXPIRED: "commands/link_confirm_expired",
    LinkOutcome.NOTHING: "commands/link_confirm_none",
}
CONFIRM_WORD = "confirm"
PLATFORM_NAMES = {"twitch": "Twitch", "youtube": "YouTube", "slack": "Slack", "discord": "Discord"}


def register(
    commands: Commands, memory: MemoryStore, *, audit: Audit | None, people: People | None = None
) -> None:
    """Add ``/link`` and ``/unlink`` to ``commands``."""
    handlers = _Handlers(people or People(memory), audit)
    commands.add(Command("link", prompts.render("commands/summary_link"), handlers.link))
    commands.add(Command("unlink", prompts.render("commands/summary_unlink"), handlers.unlink))


def platform_name(platform: str) -> str:
    return PLATFORM_NAMES.get(platform, platform.capitalize())


class _Handlers:
    def __init__(self, people: People, audit: Audit | None) -> None:
        self._people = people
        self._audit = audit

    async def link(self, message: ChatMessage, args: str) -> str:
        platform, user_id = message.platform, message.author.id
        if not args.strip():
            if not (message.is_direct or message.private_reply):
                self._record(message, "code", "refused_public")
                return prompts.render("commands/link_code_public")
            name = message.author.display_name or user_id
            code, seconds = await self._people.issue(platform, user_id, name)
            self._record(message, "code", "issued")
            return prompts.render("commands/link_code_private", code=code, minutes=seconds // 60)
        if args.strip().casefold() == CONFIRM_WORD:
            result = await self._people.confirm(platform, user_id)
        else:
            result = await self._people.redeem(platform, user_id, args)
        outcome = result.outcome
        if outcome is LinkOutcome.ASKED and result.other is not None:
            self._record(message, "link", "asked")
            return prompts.render(
                "commands/link_confirm_ask",
                platform=platform_name(result.other[0]),
                name=result.name or result.other[1],
                minutes=CONFIRM_SECONDS // 60,
            )
        if outcome is LinkOutcome.LINKED and result.other is not None:
            self._record(message, "link", "linked")
            self._record_other(message, result.other)
            return prompts.render(
                "commands/link_done",
                platform=platform_name(result.other[0]),
                pins=result.pins,
                recommendations=result.recommendations,
            )
        self._record(message, "link", f"refused_{outcome.value}")
        if outcome is LinkOutcome.SAME_PLATFORM:
            return prompts.render("commands/link_same_platform", platform=platform_name(platform))
        if outcome is LinkOutcome.MALFORMED:
            return prompts.render(
                "commands/link_malformed", length=CODE_LENGTH, example=CODE_ALPHABET[-CODE_LENGTH:]
            )
        return prompts.render(_REFUSALS[outcome], minutes=CONFIRM_SECONDS // 60)

    async def unlink(self, message: ChatMessage, args: str) -> str:
        others = await self._people.unlink(message.platform, message.author.id)
        if others is None:
            return prompts.render("commands/unlink_none")
        self._record(message, "unlink", "unlinked")
        names = sorted({platform_name(platform) for platform, _ in others})
        return prompts.render("commands/unlink_done", platforms=", ".join(names) or "-")

    def _record(self, message: ChatMessage, rule: str, action: str) -> None:
        if self._audit is not None:
            self._audit.record(
                AuditEntry.about(message, direction="link", rule=rule, action=action)
            )

    def _record_other(self, message: ChatMessage, other: tuple[str, str]) -> None:
        """The other side of a link, so the trail of either identity shows it."""
        if self._audit is not None:
            self._audit.record(
                AuditEntry(
                    at_ms=int(time.time() * 1000),
                    direction="link",
                    rule="link",
                    action=f"linked_from_{message.platform}",
                    platform=other[0],
                    user_id=other[1],
                    message_id=message.id,
                )
            )
