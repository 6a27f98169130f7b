"""The plugins shipped with Chorus, on the same public API as anyone's (``bot.plugins``).

Each is a module or package here, listed in ``bot.plugins.loader.BUILTIN`` and loaded when
``chorus.toml`` has its ``[plugins.NAME]`` table; its settings, storage, events and sending are
the ones every plugin gets, so they prove the API as much as they serve streamers.
"""
