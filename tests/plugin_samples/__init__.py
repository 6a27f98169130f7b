"""Plugins the plugin tests load by name (``CHORUS_PLUGINS=tests.plugin_samples.weather``)."""
