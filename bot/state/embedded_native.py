"""The embedded store's hot commands, run natively on fakeredis's own data.

Why: an answered message runs about seventeen commands on the embedded store (the claim's
``SET``, the history ``LRANGE``, the memory ``GET``, and the commit's ``RPUSH``, ``LTRIM``,
``EXPIRE``, ``HSET``, ``HINCRBY``, ``ZADD``, ``SET``). fakeredis runs each through its generic
machinery: every argument parsed against the command's signature, a ``CommandItem`` wrapped
around every key and written back after, the reply checked and converted. That machinery, not
the work itself, was about 40% of the instructions of an in-process turn. Here each of those
commands is a few lines doing the same thing to fakeredis's own ``Database`` and models.

Exactness is kept by being narrow. A function here handles only the plain shape of its command
(the arguments chorus sends: exact upper-case option names, integers written canonically) on
values of the right type, and answers :data:`FALLBACK` for anything else - a wrong type, an
option it does not know, a number fakeredis would refuse, a hash with field TTLs - before it
changes anything, so fakeredis's own implementation runs instead and gives its own reply or
error. What a write leaves behind is what fakeredis's ``CommandItem.writeback`` leaves: the
watchers told (``notify_watch``, which also wakes blocked readers), an emptied value removed,
the expiry scheduled. An expired key is dropped on access, as ``Database.__getitem__`` does.
Keyspace notifications are not sent from here: the socket takes the generic path while anyone
is subscribed (``bot.state.embedded``).

``tests/test_embedded_native.py`` runs the same random command sequences (wrong types, expired
keys, odd numbers, options included) through this path and through plain fakeredis and
compares every reply and the whole store after, so a fakeredis whose internals moved fails
there rather than drifting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from fakeredis._command_args_parsing import Int
from fakeredis._core import Database, Item
from fakeredis._helpers import OK, SimpleError, fix_range
from fakeredis.model import Hash, ZSet

FALLBACK: Final = object()  # "not the plain shape": run fakeredis's own implementation
Native = Callable[[Database, list[bytes], tuple[int, ...]], Any]


def _int(raw: bytes) -> int | None:
    """``raw`` as fakeredis's ``Int.decode`` reads it, or None where that refuses it."""
    try:
        return Int.decode(raw)
    except SimpleError:
        return None


def _live(db: Database, key: bytes) -> Item | None:
    """The item at ``key``, or None; an expired one is removed first, as on any access."""
    item: Item | None = db._dict.get(key)
    if item is not None and item.expireat is not None and item.expireat < db.time:
        del db._dict[key]
        return None
    return item


def _present(item: Item | None) -> bool:
    """Whether a command sees the key as there (``CommandItem.__bool__``)."""
    return item is not None and (type(item.value) is bytes or bool(item.value))


def _write(db: Database, key: bytes, item: Item | None, value: Any, expireat: float | None) -> None:
    """``CommandItem.writeback`` of a modified key: watchers told, an empty value removed,
    otherwise the value and expiry stored and the expiry scheduled."""
    db.notify_watch(key)
    if type(value) is not bytes and not value:
        db._dict.pop(key, None)
        return
    if item is None:
        item = db._dict[key] = Item(None)
    item.value = value
    item.expireat = expireat  # type: ignore[assignment]  # fakeredis declares it None only
    db.schedule_expiry(key, expireat)


def _typed(db: Database, key: bytes, kind: type) -> tuple[bool, Item | None]:
    """(ok, item): ok is False when the key holds another type (fakeredis: WRONGTYPE)."""
    item = _live(db, key)
    return (item is None or type(item.value) is kind), item


def get(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) != 1:
        return FALLBACK
    ok, item = _typed(db, args[0], bytes)
    if not ok:
        return FALLBACK
    return None if item is None else item.value


def set_(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) < 2:
        return FALLBACK
    key, value = args[0], args[1]
    nx = get_old = False
    ex = px = None
    i, n = 2, len(args)
    while i < n:
        word = args[i]
        if word == b"NX" and not nx:
            nx = True
        elif word == b"GET" and not get_old:
            get_old = True
        elif word in (b"PX", b"EX") and ex is None and px is None and i + 1 < n:
            i += 1
            amount = _int(args[i])
            if amount is None or amount <= 0:
                return FALLBACK
            if word == b"PX":
                px = amount
            else:
                ex = amount
        else:
            return FALLBACK
        i += 1
    if px is not None and db.time * 1000 + px >= 2**63:
        return FALLBACK
    if ex is not None and (db.time + ex) * 1000 >= 2**63:
        return FALLBACK
    if nx and get_old and version < (7,):
        return FALLBACK
    item = _live(db, key)
    old = None
    if get_old and item is not None:
        if type(item.value) is not bytes:
            return FALLBACK
        old = item.value
    if nx and _present(item):
        return old
    expireat = None
    if ex is not None:
        expireat = db.time + ex
    elif px is not None:
        expireat = db.time + px / 1000.0
    _write(db, key, item, value, expireat)
    return old if get_old else OK


def expire(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) != 2:
        return FALLBACK
    seconds = _int(args[1])
    if seconds is None:
        return FALLBACK
    key = args[0]
    item = _live(db, key)
    if not _present(item):
        return 0
    assert item is not None
    _write(db, key, item, item.value, db.time + seconds)
    return 1


def lrange(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) != 3:
        return FALLBACK
    start, stop = _int(args[1]), _int(args[2])
    ok, item = _typed(db, args[0], list)
    if start is None or stop is None or not ok:
        return FALLBACK
    values: list[bytes] = [] if item is None else item.value
    start, stop = fix_range(start, stop, len(values))
    return values[start:stop]


def rpush(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) < 2:
        return FALLBACK
    key = args[0]
    ok, item = _typed(db, key, list)
    if not ok:
        return FALLBACK
    values: list[bytes] = [] if item is None else item.value
    values.extend(args[1:])
    _write(db, key, item, values, None if item is None else item.expireat)
    return len(values)


def ltrim(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) != 3:
        return FALLBACK
    start, stop = _int(args[1]), _int(args[2])
    key = args[0]
    ok, item = _typed(db, key, list)
    if start is None or stop is None or not ok:
        return FALLBACK
    if _present(item):
        assert item is not None
        kept = item.value[start : None if stop == -1 else stop + 1]
        _write(db, key, item, kept, item.expireat)
    return OK


def _plain_hash(item: Item | None) -> tuple[bool, Hash]:
    """(ok, hash): ok is False for another type or a hash with field TTLs (fakeredis's own
    code then runs: it expires fields and reports them)."""
    if item is None:
        return True, Hash()
    value = item.value
    if type(value) is not Hash or value._expirations or value._expired_fields:
        return False, value
    return True, value


def hset(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) < 3 or len(args) % 2 == 0:
        return FALLBACK
    key = args[0]
    item = _live(db, key)
    ok, fields = _plain_hash(item)
    if not ok:
        return FALLBACK
    before = len(fields)
    fields.update(dict(zip(args[1::2], args[2::2], strict=True)), clear_expiration=True)
    _write(db, key, item, fields, None if item is None else item.expireat)
    return len(fields) - before


def hincrby(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    if len(args) != 3:
        return FALLBACK
    key, field = args[0], args[1]
    amount = _int(args[2])
    item = _live(db, key)
    ok, fields = _plain_hash(item)
    if amount is None or not ok:
        return FALLBACK
    current = _int(fields.get(field, b"0"))
    if current is None or not Int.valid(current + amount):
        return FALLBACK
    total = current + amount
    fields.update({field: str(total).encode()}, clear_expiration=False)
    _write(db, key, item, fields, None if item is None else item.expireat)
    return total


_ZADD_OPTIONS = frozenset({b"NX", b"XX", b"GT", b"LT", b"CH"})


def zadd(db: Database, args: list[bytes], version: tuple[int, ...]) -> Any:
    """``ZADD key [NX|XX] [GT|LT] [CH] score member ...`` with integer scores (not INCR)."""
    i = 1
    while i < len(args) and args[i] in _ZADD_OPTIONS:
        i += 1
    given = set(args[1:i])
    pairs = args[i:]
    nx, xx, gt, lt = (b"NX" in given), (b"XX" in given), (b"GT" in given), (b"LT" in given)
    if not pairs or len(pairs) % 2 or (nx and xx) or nx + gt + lt > 1:
        return FALLBACK
    scores = [_int(raw) for raw in pairs[::2]]
    key = args[0]
    ok, item = _typed(db, key, ZSet)
    if not ok or None in scores:
        return FALLBACK
    zset: ZSet = ZSet() if item is None else item.value
    before = len(zset)
    changed = 0
    conditions = nx + xx + gt + lt
    for number, member in zip(scores, pairs[1::2], strict=True):
        assert number is not None
        score = float(number)
        old = zset.get(member)
        if conditions == 0:
            update = True
        elif old is None:  # fakeredis's rules, read for a new member and an existing one
            update = (conditions == 1 and nx) or ((gt or lt) and not xx)
        else:
            update = (conditions == 1 and xx) or (gt and old < score) or (lt and old > score)
        if update and zset.add(member, score):
            changed += 1
    if changed:
        _write(db, key, item, zset, None if item is None else item.expireat)
    return changed if b"CH" in given else len(zset) - before


NATIVE: dict[str, Native] = {
    "get": get,
    "set": set_,
    "expire": expire,
    "lrange": lrange,
    "rpush": rpush,
    "ltrim": ltrim,
    "hset": hset,
    "hincrby": hincrby,
    "zadd": zadd,
}
"""fakeredis's command name (its ``Signature.name``) to the native function."""
