"""Twitch: EventSub websocket chat in, Send Chat Message API out (twitchio 3, not IRC)."""

from __future__ import annotations

from adapters.twitch.adapter import TwitchAdapter

__all__ = ["TwitchAdapter"]
