"""Chorus speaks: text-to-speech providers, the chain that falls back between them, and what a
channel says aloud on its stream overlay (``bot.admin.overlay`` serves the page)."""
