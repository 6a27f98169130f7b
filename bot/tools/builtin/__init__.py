"""The built-in tools: ``current_time``, ``fetch_page`` and (with ``CHORUS_FEEDS``) ``news_headlines``.

``builtin_tools`` wires them from ``ToolSettings``: one ``Fetcher`` behind one ``NetGuard`` (the
``CHORUS_FETCH_ALLOW`` exceptions) serves both network tools, so they share the SSRF rules.
The feeds tool (with the XML parsers: memory and start-up time for nothing) is imported only where
``CHORUS_FEEDS`` is set: most deployments follow no feed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.settings.allowlist import Allowlist
from bot.tools.base import Tool
from bot.tools.builtin.clock import clock_tool
from bot.tools.builtin.fetch import Fetcher, fetch_page_tool
from bot.tools.netguard import NetGuard

if TYPE_CHECKING:
    from bot.settings import ToolSettings

__all__ = ["builtin_tools", "clock_tool", "fetch_page_tool"]


def builtin_tools(settings: ToolSettings) -> list[Tool]:
    """The built-ins for a deployment; network tools get at least the fetch deadline + 5 s."""
    fetcher = Fetcher(
        NetGuard(allow=Allowlist.parse(settings.fetch_allow)),
        max_bytes=settings.fetch_max_bytes,
        timeout=settings.fetch_timeout,
    )
    network_timeout = max(settings.tool_timeout, settings.fetch_timeout + 5.0)
    tools: list[Tool] = [
        clock_tool(timeout=settings.tool_timeout),
        fetch_page_tool(fetcher, timeout=network_timeout),
    ]
    if settings.feeds:
        from bot.tools.builtin.feeds import FeedReader, feeds_tool

        tools.append(feeds_tool(FeedReader(settings.feeds, fetcher), timeout=network_timeout))
    return tools
