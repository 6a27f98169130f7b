"""Slack: bolt for Python (Socket Mode or the HTTP Events API) behind Chorus's event bus.

``SlackAdapter.from_section(settings.slack, bus, redis)`` builds it when ``SLACK_BOT_TOKEN`` (one
workspace) or ``SLACK_CLIENT_ID`` (many, installed through OAuth: ``workspaces``,
``installations``) is set. The pure conversions live in ``convert`` and ``mrkdwn``; every
outbound call goes through ``sender``.
"""

from __future__ import annotations

from adapters.slack.adapter import SlackAdapter

__all__ = ["SlackAdapter"]
