"""The configuration as a start would load it now, for the pages that show what the file says.

Why not ``Sources.settings``: that is what the process started with; a save from the dashboard
(or ``chorus reload``) changes what every process runs without replacing it. A page that lists
scopes, knowledge bases or plugin tables reads the file as a reload would, once per version of
the file (its modification time and size), in a worker thread: a page view costs a ``stat``.
"""

from __future__ import annotations

import asyncio
import threading

from bot.admin.config_pages import config_path
from bot.admin.views import Sources
from bot.settings import ConfigError, Settings, load_settings

_lock = threading.Lock()
_cache: dict[tuple[str, int, int], Settings] = {}


def _load(src: Sources) -> Settings:
    path = config_path(src)
    try:
        stat = path.stat()
    except OSError:
        return src.settings
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    with _lock:
        found = _cache.get(key)
    if found is not None:
        return found
    try:
        found = load_settings(config=path, warn=False)
    except ConfigError:
        return src.settings  # a file a start would refuse: the running configuration holds
    with _lock:
        _cache.clear()
        _cache[key] = found
    return found


async def current(src: Sources) -> Settings:
    """The settings the file gives now (the process's own when there is no file, or it would
    not load)."""
    return await asyncio.to_thread(_load, src)
