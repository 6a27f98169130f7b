"""The golden case of what users read while an answer is written (``prompts/progress/*`` and
each platform's way of showing it): the activities of the built-in tools and of any other, a
Discord draft with its grey progress line, Slack's assistant status, the console's spinner,
welcome and log lines. Registered as a case by ``tests/test_prompts_golden.py``."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from adapters.console_tty import activity_line, logs_line, welcome_line
from adapters.discord.convert import draft_contents
from adapters.slack.drafts import status_text
from bot.events import ConversationKey, ReplyDraft
from bot.router.drafts import activity


async def progress_texts(redis: Redis) -> str:
    activities = [
        activity(tools)
        for tools in (["fetch_page"], ["news_headlines"], ["current_time"], ["weather"], [])
    ]
    draft = ReplyDraft(
        conversation=ConversationKey(platform="discord", channel="general"),
        reply_to_id="m1",
        text="Let me look.",
        status=activities[0],
        seq=1,
    )
    lines = [*activities, *draft_contents(draft), status_text(activities[0])]
    lines += [activity_line("Chorus", activities[-1]), welcome_line("Chorus", "anthropic:claude")]
    lines.append(logs_line(Path("/home/ada/.local/state/chorus/chorus.log")))
    return "\n".join(lines)
