"""``chorus plugins list`` and ``chorus plugins info NAME`` as a real process: what loads, from
where, what each adds, its settings as the file sets them with secrets masked, and the plugins
that failed with why (exit status 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_chat_e2e import ROOT, base_env, run_chorus

# It starts processes (tests/suite_rules.py): `make test-fast` leaves it out.
pytestmark = pytest.mark.e2e

CONFIG = """
[plugins]
modules = ["tests.plugin_samples.configured", "tests.plugin_samples.ticker", "no_such_plugin"]

[plugins."tests.plugin_samples.configured"]
greeting = "hi"
"""


async def test_list_and_info_show_sources_handlers_settings_and_errors(tmp_path: Path) -> None:
    (tmp_path / "chorus.toml").write_text(CONFIG)
    env = base_env(tmp_path) | {"GREET_TOKEN": "tok-very-secret-42", "PYTHONPATH": str(ROOT)}
    code, out, err = await run_chorus(["plugins", "list"], env, tmp_path)
    assert code == 1, err  # one plugin did not load
    assert "tests.plugin_samples.configured" in out and "commands=/greet" in out
    assert "timers=tick" in out
    assert "no_such_plugin           NOT LOADED: ModuleNotFoundError" in out
    code, out, err = await run_chorus(
        ["plugins", "info", "tests.plugin_samples.configured"], env, tmp_path
    )
    assert code == 0, err
    assert f"{ROOT}/tests/plugin_samples/configured.py" in out
    assert "command   /greet: Greet, as the place's settings say." in out
    assert "settings  [plugins.tests.plugin_samples.configured] (GreetSettings)" in out
    assert "greeting = 'hi'" in out and "limit = 3" in out
    assert "token = *** (GREET_TOKEN, set)" in out
    assert "tok-very-secret" not in out + err
    code, out, _ = await run_chorus(
        ["plugins", "info", "tests.plugin_samples.ticker"], env, tmp_path
    )
    assert code == 0 and "timer     tick: every 2s" in out
    code, out, _ = await run_chorus(["plugins", "info", "nobody"], env, tmp_path)
    assert code == 1 and "no plugin named 'nobody' is loaded" in out


async def test_a_bad_setting_is_reported_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "chorus.toml").write_text(CONFIG + "limit = 0\n")
    env = base_env(tmp_path) | {"PYTHONPATH": str(ROOT)}
    code, out, _ = await run_chorus(["plugins", "list"], env, tmp_path)
    assert code == 1
    assert f"{tmp_path / 'chorus.toml'}:7: plugins.tests.plugin_samples.configured.limit" in out
