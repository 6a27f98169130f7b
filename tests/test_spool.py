"""The gateway's spool (``bot.bus.spool``) on a real directory: written whole or not at all, read
back in order, replayed by one gateway at a time when several share the directory, a file that
cannot be read back set aside (never a crash), and an outbox whose spool holds a corrupt file
still starts. The outbox's use of it over Redis is in ``test_outbox``.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.bus.base import InProcessBus
from bot.bus.outbox import Outbox
from bot.bus.spool import Spool
from bot.bus.topics import DELETIONS, INBOUND
from bot.events import Author, ChatMessage, ConversationKey, MessageDeleted

T0 = datetime(2025, 1, 2, tzinfo=UTC)


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
    spool = Spool(tmp_path / "spool")
    deleted = MessageDeleted(conversation=message(0).conversation, message_id="m0")
    items = [(INBOUND, message(0)), (DELETIONS, deleted), (INBOUND, message(1))]
    path, count = spool.write(items)
    assert count == 3
    assert path.parent == tmp_path / "spool" and path.name.startswith("outbox-")
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary file is left"
    (claim,) = spool.claim()
    assert claim.events == items


def test_files_replay_oldest_first_and_a_finished_file_is_gone(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.write([(INBOUND, message(0))])
    spool.write([(INBOUND, message(1))])
    claims = spool.claim()
    assert [c.events[0][1] for c in claims] == [message(0), message(1)]
    for claim in claims:
        claim.finish()
    assert list(tmp_path.iterdir()) == []
    assert spool.claim() == []


def test_two_gateways_sharing_a_directory_never_replay_one_file(tmp_path: Path) -> None:
    path, _ = Spool(tmp_path).write([(INBOUND, message(0))])
    first, second = Spool(tmp_path), Spool(tmp_path)
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
    spool = Spool(tmp_path)
    good, _ = spool.write([(INBOUND, message(1))])
    bad = tmp_path / "outbox-00000000000000000001-1-deadbeef.jsonl"
    bad.write_text('{"v": 1, "topic": "inbound", "model": "ChatMessage", "event": "{not json"}\n')
    unknown = tmp_path / "outbox-00000000000000000002-1-deadbeef.jsonl"
    unknown.write_text('{"v": 1, "topic": "inbound", "model": "Bogus", "event": "{}"}\n')
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
    assert Spool(tmp_path).claim() == []


def test_a_missing_directory_is_an_empty_spool(tmp_path: Path) -> None:
    assert Spool(tmp_path / "never-created").claim() == []


async def test_an_outbox_starts_past_a_corrupt_spool_and_replays_the_rest(
    tmp_path: Path,
) -> None:
    Spool(tmp_path).write([(INBOUND, message(0)), (INBOUND, message(1))])
    (tmp_path / "outbox-00000000000000000001-1-deadbeef.jsonl").write_text("garbage\n")
    bus = InProcessBus()
    outbox = Outbox(bus, spool=Spool(tmp_path))
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
    assert Spool(tmp_path / "a" / "b").writable()
    assert not (tmp_path / "a").exists()
    (tmp_path / "ro").mkdir(mode=0o500)
    try:
        assert Spool(tmp_path / "ro" / "spool").writable() is (os.geteuid() == 0)
    finally:
        (tmp_path / "ro").chmod(0o700)
