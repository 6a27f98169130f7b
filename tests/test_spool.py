"""The gateway's spool (``bot.bus.spool``) on a real directory: written whole or not at all, read
back in order, replayed by one gateway at a time when several share the directory, a file that
cannot be read back set aside (never a crash), a file not signed with the deployment's key
refused (counted) and set aside, set-aside files deleted after their retention, and an outbox
whose spool holds a corrupt file still starts. The outbox's use of it over Redis is in
``test_outbox``; a real gateway refusing a planted file in ``test_spool_e2e``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.bus.base import InProcessBus
from bot.bus.outbox import Outbox
from bot.bus.spool import Spool, signature
from bot.bus.spool_key import spool_key
from bot.bus.topics import DELETIONS, INBOUND
from bot.events import Author, ChatMessage, ConversationKey, MessageDeleted, Role
from bot.settings import settings_from
from bot.settings.state import StateSettings

T0 = datetime(2025, 1, 2, tzinfo=UTC)
KEY = b"k" * 32


def signed_line(topic: str, model: str, event: str, key: bytes = KEY) -> str:
    """One spool record as a gateway holding ``key`` writes it."""
    record = {"v": 2, "topic": topic, "model": model, "event": event}
    return json.dumps(record | {"sig": signature(key, topic, model, event)}) + "\n"


def message(n: int) -> ChatMessage:
    return ChatMessage(
        platform="slack",
        id=f"m{n}",
        conversation=ConversationKey(platform="slack", channel="C1"),
        author=Author(id="U1"),
        text=f"hello {n}",
        sent_at=T0,
    )


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_written_events_read_back_in_order_with_their_topic_and_model(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", key=KEY)
    deleted = MessageDeleted(conversation=message(0).conversation, message_id="m0")
    items = [(INBOUND, message(0)), (DELETIONS, deleted), (INBOUND, message(1))]
    path, count = spool.write(items)
    assert count == 3
    assert path.parent == tmp_path / "spool" and path.name.startswith("outbox-")
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary file is left"
    (claim,) = spool.claim()
    assert claim.events == items


def test_files_replay_oldest_first_and_a_finished_file_is_gone(tmp_path: Path) -> None:
    spool = Spool(tmp_path, key=KEY)
    spool.write([(INBOUND, message(0))])
    spool.write([(INBOUND, message(1))])
    claims = spool.claim()
    assert [c.events[0][1] for c in claims] == [message(0), message(1)]
    for claim in claims:
        claim.finish()
    assert list(tmp_path.iterdir()) == []
    assert spool.claim() == []


def test_two_gateways_sharing_a_directory_never_replay_one_file(tmp_path: Path) -> None:
    path, _ = Spool(tmp_path, key=KEY).write([(INBOUND, message(0))])
    first, second = Spool(tmp_path, key=KEY), Spool(tmp_path, key=KEY)
    (claim,) = first.claim()
    assert second.claim() == [], "locked by the first gateway"
    claim.release()  # the first gateway died mid-replay: the lock goes with it
    (again,) = second.claim()
    assert again.path == path
    again.finish()
    assert first.claim() == []


def test_a_file_that_cannot_be_read_back_is_set_aside_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, key=KEY)
    good, _ = spool.write([(INBOUND, message(1))])
    bad = tmp_path / "outbox-00000000000000000001-1-deadbeef.jsonl"
    bad.write_text(signed_line("inbound", "ChatMessage", "{not json"))
    unknown = tmp_path / "outbox-00000000000000000002-1-deadbeef.jsonl"
    unknown.write_text(signed_line("inbound", "Bogus", "{}"))
    binary = tmp_path / "outbox-00000000000000000003-1-deadbeef.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with caplog.at_level(logging.ERROR, logger="chorus.bus"):
        claims = spool.claim()
    assert [c.path for c in claims] == [good]
    assert names(tmp_path) == sorted(
        [good.name, *(f"corrupt-{p.name}" for p in (bad, unknown, binary))]
    )
    errors = [r for r in caplog.records if "cannot be read back" in r.getMessage()]
    assert len(errors) == 3
    assert "unknown event model 'Bogus'" in str(errors[1].error)  # type: ignore[attr-defined]


def test_a_temporary_file_of_an_interrupted_write_is_never_read(tmp_path: Path) -> None:
    (tmp_path / ".outbox-00000000000000000001-1-deadbeef.tmp").write_text("half a li")
    assert Spool(tmp_path, key=KEY).claim() == []


def test_a_missing_directory_is_an_empty_spool(tmp_path: Path) -> None:
    assert Spool(tmp_path / "never-created", key=KEY).claim() == []


async def test_an_outbox_starts_past_a_corrupt_spool_and_replays_the_rest(
    tmp_path: Path,
) -> None:
    Spool(tmp_path, key=KEY).write([(INBOUND, message(0)), (INBOUND, message(1))])
    (tmp_path / "outbox-00000000000000000001-1-deadbeef.jsonl").write_text("garbage\n")
    bus = InProcessBus()
    outbox = Outbox(bus, spool=Spool(tmp_path, key=KEY))
    assert await outbox.recover() == 2
    consumer = outbox.consume(INBOUND, ChatMessage, group="agent")
    got = []
    for _ in range(2):
        delivery = await anext(consumer)
        got.append(delivery.event)
        await delivery.ack()
    await outbox.drain(timeout=5)
    assert got == [message(0), message(1)]
    assert names(tmp_path) == ["corrupt-outbox-00000000000000000001-1-deadbeef.jsonl"]
    await outbox.close()


def test_writable_is_checked_without_creating_the_directory(tmp_path: Path) -> None:
    assert Spool(tmp_path / "a" / "b", key=KEY).writable()
    assert not (tmp_path / "a").exists()
    (tmp_path / "ro").mkdir(mode=0o500)
    try:
        assert Spool(tmp_path / "ro" / "spool", key=KEY).writable() is (os.geteuid() == 0)
    finally:
        (tmp_path / "ro").chmod(0o700)


def planted(message: ChatMessage) -> str:
    """A record as someone who can write into the directory but holds no key would write it:
    the format of a spool file, in either version, unsigned or signed with a guessed key."""
    return json.dumps(
        {"v": 1, "topic": INBOUND, "model": "ChatMessage", "event": message.model_dump_json()}
    )


def test_a_file_not_signed_with_the_deployments_key_is_refused_counted_and_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    moderator = message(9).model_copy(
        update={
            "author": Author(id="U9", roles=frozenset({Role.MODERATOR, Role.OWNER})),
            "text": "!chorus pause",
        }
    )
    spool = Spool(tmp_path, key=KEY)
    good, _ = spool.write([(INBOUND, message(1))])
    unsigned = tmp_path / "outbox-00000000000000000001-1-aaaaaaaa.jsonl"
    unsigned.write_text(planted(moderator) + "\n")
    other_key = tmp_path / "outbox-00000000000000000002-1-bbbbbbbb.jsonl"
    other_key.write_text(
        signed_line(INBOUND, "ChatMessage", moderator.model_dump_json(), b"x" * 32) * 2
    )
    altered = tmp_path / "outbox-00000000000000000003-1-cccccccc.jsonl"
    line = json.loads(good.read_text())
    line["event"] = moderator.model_dump_json()  # the signature of another event
    altered.write_text(json.dumps(line) + "\n")
    with caplog.at_level(logging.ERROR, logger="chorus.bus"):
        claims = spool.claim()
    assert [c.path for c in claims] == [good]
    assert [e for c in claims for _, e in c.events] == [message(1)]
    assert spool.refused == 4, "every record that did not verify is counted"
    aside = [f"corrupt-{p.name}" for p in (unsigned, other_key, altered)]
    assert names(tmp_path) == sorted([good.name, *aside])
    refusals = [r for r in caplog.records if "does not verify" in r.getMessage()]
    assert len(refusals) == 3


def test_set_aside_files_are_deleted_once_past_their_retention(tmp_path: Path) -> None:
    now = time.time()
    spool = Spool(tmp_path, key=KEY, corrupt_retention=3600, clock=lambda: now)
    (tmp_path / "outbox-00000000000000000001-1-aaaaaaaa.jsonl").write_text(planted(message(0)))
    assert spool.claim() == []
    (aside,) = tmp_path.iterdir()
    old = tmp_path / "corrupt-outbox-00000000000000000000-1-dddddddd.jsonl"
    old.write_text("set aside long ago\n")
    os.utime(old, (now - 3601, now - 3601))
    assert spool.claim() == []
    assert names(tmp_path) == [aside.name], "the recent one stays for inspection"
    later = Spool(tmp_path, key=KEY, corrupt_retention=3600, clock=lambda: now + 3601)
    assert later.claim() == [] and names(tmp_path) == []


def test_the_spool_directory_is_absolute_under_the_data_directory_whatever_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    default = StateSettings().spool_path()
    assert default == tmp_path / "home" / ".local" / "share" / "chorus" / "spool"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert StateSettings().spool_path() == tmp_path / "xdg" / "chorus" / "spool"
    given = StateSettings(data_dir="data", spool_dir="outbox")
    assert given.spool_path() == tmp_path / "data" / "outbox"
    assert StateSettings(spool_dir="/var/lib/chorus/spool").spool_path() == Path(
        "/var/lib/chorus/spool"
    )
    monkeypatch.chdir(tmp_path / "..")
    assert StateSettings().spool_path() == tmp_path / "xdg" / "chorus" / "spool"


def test_the_spool_key_is_the_deployments_own(tmp_path: Path) -> None:
    base = {"CHORUS_DATA_DIR": str(tmp_path)}
    with_model = settings_from(base | {"ANTHROPIC_API_KEY": "sk-one"})
    assert spool_key(with_model) == spool_key(settings_from(base | {"ANTHROPIC_API_KEY": "sk-one"}))
    assert spool_key(with_model) != spool_key(settings_from(base | {"ANTHROPIC_API_KEY": "sk-2"}))
    chosen = base | {"CHORUS_SPOOL_SECRET": "s" * 24}
    assert spool_key(settings_from(chosen | {"ANTHROPIC_API_KEY": "sk-one"})) == spool_key(
        settings_from(chosen | {"ANTHROPIC_API_KEY": "sk-2"})
    ), "a chosen secret keeps the key when a model key rotates"
    other_ns = settings_from(base | {"ANTHROPIC_API_KEY": "sk-one", "CHORUS_BUS_NAMESPACE": "b"})
    assert spool_key(other_ns) != spool_key(with_model)
    bare = settings_from(base)
    first = spool_key(bare)
    assert (tmp_path / "spool.key").stat().st_mode & 0o777 == 0o600
    assert spool_key(settings_from(base)) == first, "stored once, then read back"
