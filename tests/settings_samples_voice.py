"""Samples of the voice settings (``CHORUS_VOICE``, ``CHORUS_TTS*``, ``ELEVENLABS_*``) for
tests/test_settings_sources.py: each variable, a value from ``.env``, what it becomes."""

from __future__ import annotations

from typing import Any

VOICE_SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "CHORUS_VOICE": (("voice.enabled",), "true", True),
    "CHORUS_TTS": (("voice.tts",), "openai:alloy, espeak:de", ("openai:alloy", "espeak:de")),
    "CHORUS_TTS_ANSWERS": (("voice.answers",), "false", False),
    "CHORUS_TTS_CHEER_MIN_BITS": (("voice.cheer_min_bits",), "500", 500),
    "CHORUS_TTS_SUPER_CHATS": (("voice.super_chats",), "false", False),
    "CHORUS_TTS_REWARDS": (("voice.rewards",), "Hydrate, Say hi", ("Hydrate", "Say hi")),
    "CHORUS_TTS_QUEUE_MAX": (("voice.queue_max",), "5", 5),
    "CHORUS_TTS_MAX_SECONDS": (("voice.max_seconds",), "12.5", 12.5),
    "CHORUS_TTS_MAX_CHARS": (("voice.max_chars",), "200", 200),
    "CHORUS_TTS_CHANNEL_CHARS_HOUR": (("voice.channel_chars_hour",), "900", 900),
    "CHORUS_TTS_USER_CHARS_HOUR": (("voice.user_chars_hour",), "90", 90),
    "CHORUS_TTS_OPENAI_MODEL": (("voice.openai_model",), "tts-1-hd", "tts-1-hd"),
    "CHORUS_TTS_GEMINI_MODEL": (("voice.gemini_model",), "gemini-x-tts", "gemini-x-tts"),
    "CHORUS_TTS_ELEVENLABS_MODEL": (("voice.elevenlabs_model",), "eleven_x", "eleven_x"),
    "ELEVENLABS_API_KEY": (("voice.elevenlabs_api_key",), "el-key", "el-key"),
    "ELEVENLABS_BASE_URL": (("voice.elevenlabs_base_url",), "http://el.local", "http://el.local"),
    "CHORUS_TTS_TIMEOUT": (("voice.timeout",), "4", 4.0),
}
