"""Slack: bolt for Python (Socket Mode or the HTTP Events API) behind Chorus's event bus.

``SlackAdapter.from_env(bus)`` returns None unless ``SLACK_BOT_TOKEN`` is set. The pure
conversions live in ``convert`` and ``mrkdwn``; every outbound call goes through ``sender``.
"""

from __future__ import annotations

from adapters.slack.adapter import SlackAdapter
from adapters.slack.settings import SlackMode, SlackSettings, load_slack_settings

__all__ = ["SlackAdapter", "SlackMode", "SlackSettings", "load_slack_settings"]
