"""The dashboard's configuration editor over aiohttp's test client and a real store: an edit
reaches ``chorus.toml`` with its comments, is audited with before and after, and asks every
process to reload; an invalid regex is refused with the start's message by its field and
writes nothing; a file changed meanwhile is a conflict; a secret is never written."""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin import config_file
from bot.admin.server import AdminServer
from bot.admin.views import Sources
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit, read_audit
from bot.settings import load_settings
from bot.state.config_reloads import ConfigReloads
from bot.state.history import HistoryStore
from tests.test_admin import TOKEN, login

Client = TestClient[web.Request, web.Application]
FILE = """\
# the operator's own words, kept
[personas.pirate]
name = "Captain Byte"  # arr
prompt = "You are Captain Byte."

[personas.librarian]
prompt = "You are Ms. Quill."

[[scope]]
match = "console:alice"
persona = "pirate"

# bob's corner
[[scope]]
match = "console:bob"
persona = "librarian"
"""


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    path = tmp_path / "chorus.toml"
    path.write_text(FILE, encoding="utf-8")
    return path


@pytest.fixture
async def http(redis_client: Redis, key_tag: str, toml: Path) -> AsyncIterator[Client]:
    settings = load_settings(environ={}, env_file=None, config=toml, warn=False)
    reloads: list[int] = []
    sources = Sources(
        settings=settings,
        redis=redis_client,
        memory=MemoryStore(redis_client),
        history=HistoryStore(redis_client, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis_client, namespace=key_tag),
        reload=lambda: reloads.append(1),
    )
    async with TestClient(TestServer(AdminServer(sources, TOKEN).app())) as client:
        yield client


def on_disk(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def form_of(page: str) -> dict[str, str]:
    """The form's values as a browser would post them (inputs, selects, textareas)."""
    found = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page))
    for name, value in re.findall(r'<input id="([\w.]+)" name="[\w.]+" value="([^"]*)"', page):
        found[name] = value
    for name, value in re.findall(r'<textarea id="([\w.]+)"[^>]*>\n?(.*?)</textarea>', page, re.S):
        found[name] = value
    for name, body in re.findall(r'<select id="([\w.]+)"[^>]*>(.*?)</select>', page, re.S):
        chosen = re.search(r"<option selected>([^<]*)</option>", body)
        found[name] = chosen[1] if chosen else ""  # "(not set here)"
    return found


async def test_an_edit_is_reviewed_saved_with_its_comments_audited_and_reloaded(
    http: Client, toml: Path, redis_client: Redis, key_tag: str
) -> None:
    csrf = await login(http)
    before = await ConfigReloads(redis_client).count()
    form = form_of(await (await http.get("/config")).text())
    assert form["scope.0.persona"] == "pirate" and form["csrf"] == csrf
    form["scope.0.persona"] = "librarian"
    review = await http.post("/config", data={**form, "action": "preview"})
    text = await review.text()
    assert review.status == 200, re.findall(r"class=\"error[^>]*>([^<]*)", text)
    assert "-persona = &#34;pirate&#34;" in text
    assert on_disk(toml) == FILE, "a review writes nothing"
    saved = await http.post("/config", data={**form, "action": "save"}, allow_redirects=False)
    assert saved.status == 303
    written = on_disk(toml)
    assert "# the operator's own words, kept" in written and "# arr" in written
    assert "# bob's corner" in written
    scopes = tomllib.loads(written)["scope"]
    assert [s["persona"] for s in scopes] == ["librarian", "librarian"]
    assert written == FILE.replace('persona = "pirate"', 'persona = "librarian"')
    assert await ConfigReloads(redis_client).count() == before + 1
    entries = await read_audit(redis_client, namespace=key_tag)
    edit = [e for e in entries if e.rule == "config:edit"]
    assert edit and edit[0].detail == "scope.0.persona: 'pirate' -> 'librarian'"


async def test_an_invalid_regex_shows_the_starts_message_by_its_field_and_writes_nothing(
    http: Client, toml: Path
) -> None:
    await login(http)
    form = form_of(await (await http.get("/config")).text())
    form["scope.1.safety.patterns"] = "spoil(er"
    refused = await http.post("/config", data={**form, "action": "save"})
    page = await refused.text()
    assert refused.status == 400
    assert on_disk(toml) == FILE
    error = re.search(r'id="scope.1.safety.patterns-error">([^<]*)<', page)
    assert error is not None
    message = error[1].replace("&#39;", "'")
    assert f"{toml}:" in message and "[[scope]] #2: safety.patterns" in message
    assert "invalid regular expression 'spoil(er'" in message
    assert not list(toml.parent.glob(".chorus.toml.*")), "the checked copy is removed"


async def test_a_file_changed_meanwhile_is_a_conflict_never_overwritten(
    http: Client, toml: Path
) -> None:
    await login(http)
    form = form_of(await (await http.get("/config")).text())
    by_hand = FILE + '\n[agent]\nbot_name = "Ada"\n'
    write(toml, by_hand)
    form["scope.0.persona"] = "librarian"
    refused = await http.post("/config", data={**form, "action": "save"})
    assert refused.status == 409 and 'href="/config"' in await refused.text()
    assert on_disk(toml) == by_hand


async def test_a_secret_is_never_written(http: Client, toml: Path) -> None:
    await login(http)
    form = form_of(await (await http.get("/config")).text())
    form["personas.pirate.prompt"] = f"You are {TOKEN}"
    refused = await http.post("/config", data={**form, "action": "save"})
    assert refused.status == 400 and on_disk(toml) == FILE


def test_an_unset_field_removes_its_key_and_an_emptied_table_goes_too() -> None:
    text, changes = config_file.edit(
        FILE.replace('persona = "librarian"', 'persona = "librarian"\nsafety = {words = ["x"]}'),
        {"scope.1.safety.words": ""},
    )
    assert "safety" not in text and [c.name for c in changes] == ["scope.1.safety.words"]


def test_a_persona_and_a_scope_are_added_after_what_the_file_has() -> None:
    text, changes = config_file.edit(FILE, {"new.persona": "bard", "new.scope": "console:carol"})
    assert "# bob's corner" in text and text.endswith('[[scope]]\nmatch = "console:carol"\n')
    added = tomllib.loads(text)
    assert added["personas"]["bard"] == {} and added["scope"][2] == {"match": "console:carol"}
    assert [c.name for c in changes] == ["personas.bard", "scope.2.match"]
    with pytest.raises(ValueError, match="a persona 'pirate' already"):
        config_file.edit(FILE, {"new.persona": "pirate"})


async def test_a_new_scope_with_a_bad_match_is_refused_with_the_starts_message(
    http: Client, toml: Path
) -> None:
    await login(http)
    form = form_of(await (await http.get("/config")).text())
    form["new.scope"] = "myspace:1"
    refused = await http.post("/config", data={**form, "action": "save"})
    page = await refused.text()
    assert refused.status == 400 and on_disk(toml) == FILE
    assert "[[scope]] #3: match" in page, re.findall(r"class=\"error[^>]*>(.*?)</", page, re.S)
    assert 'value="myspace:1"' in page
