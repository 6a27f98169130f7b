"""The Knowledge page: every knowledge base the configuration names (the deployment's and each
scope's), its indexing state, chunks and last check with what it skipped; a file uploaded into
one of its folders; a URL added to a scope's ``knowledge`` list; a re-index now; and a search
box showing what the bot would retrieve for a question, with the scores.

Why it indexes and searches with parts of its own (``RecallParts.build``, as ``chorus knowledge
index`` does): the page may be served by any process, one with no indexer of its own
included; what it writes is the store every process reads (the base's version moves, and each
reply path loads the new chunks at its next turn). Its embedding calls go through the same
metered embedder, so they count against the daily cost cap: once the cap is reached nothing is
embedded and the page says so. The search is the reply path's own (``Recall.search``: the
query embedded when a model is configured, the same limit and threshold), so what it shows is
the excerpts a message in that scope would get in its ``<knowledge>`` block.

An upload is checked before anything is written: a name of plain characters, a suffix the
knowledge base reads (``TEXT_SUFFIXES``), at most ``UPLOAD_MAX_BYTES``, and content of that type
(UTF-8 text without NUL bytes, or a PDF's signature); it is written atomically into a folder
the base already reads (never elsewhere), then the base is indexed. A URL is added through the
configuration editor's path (bot/admin/config_file.py: tomlkit, the start's check, atomic write,
audit, every process reloaded).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.admin import config_file, loaded
from bot.admin.config_pages import AuditFn, Render, config_path, write_and_reload
from bot.admin.views import Sources
from bot.knowledge.files import TEXT_SUFFIXES
from bot.knowledge.wiring import RecallParts
from bot.memory.knowledge import base_id, load_index
from bot.memory.vectors import unit
from bot.ops.model_calls import CostCapReached
from bot.settings import Settings
from bot.state.connect import Client
from bot.state.knowledge import KnowledgeStore

UPLOAD_MAX_BYTES = 1_000_000  # one uploaded file (the dashboard's request limit is 1 MiB)
SEARCH_LIMIT = 4  # what a turn's <knowledge> block draws from (bot/memory/recall.py)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,120}$")
Issue = Callable[[str], str]  # a notice's text -> the query of the redirect


@dataclass(frozen=True)
class Base:
    """One knowledge base: its sources, its id, who uses it, and the folders it reads."""

    sources: tuple[str, ...]
    id: str
    used_by: tuple[str, ...]
    folders: tuple[str, ...]


def bases(settings: Settings) -> list[Base]:
    found: dict[tuple[str, ...], list[str]] = {}
    deployment = tuple(settings.memory.knowledge_sources)
    if deployment:
        found.setdefault(deployment, []).append("the deployment (CHORUS_KNOWLEDGE_PATHS)")
    for scope in settings.file.scopes:
        if scope.knowledge:
            found.setdefault(tuple(scope.knowledge), []).append(f"[[scope]] {scope.match}")
    return [
        Base(
            sources,
            base_id(sources),
            tuple(used),
            tuple(s for s in sources if not s.startswith(("http://", "https://")) and _dir(s)),
        )
        for sources, used in found.items()
    ]


def _dir(source: str) -> bool:
    return Path(source).is_dir()


def _find(settings: Settings, wanted: str) -> Base:
    base = next((b for b in bases(settings) if b.id == wanted), None)
    if base is None:
        raise web.HTTPNotFound(text=f"no knowledge base {wanted!r} in the configuration")
    return base


async def page(
    src: Sources, request: web.Request, render: Render, *, can_edit: bool
) -> web.Response:
    settings = await loaded.current(src)
    found = bases(settings)
    store = KnowledgeStore(src.redis)
    statuses = await store.status_many([b.id for b in found])
    rows = []
    for base, status in zip(found, statuses, strict=True):
        if status is None or "chunks" not in status:  # never checked by this version: count
            status = await _counted(store, base.id, status)
        rows.append({"base": base, "status": status})
    question = request.query.get("q", "").strip()[:500]
    chosen = request.query.get("base", found[0].id if found else "")
    hits: list[Any] = []
    searched, problem = False, ""
    if question and chosen:
        base = _find(settings, chosen)
        try:
            hits, block = await search(src, settings, base, question)
        except CostCapReached as exc:
            problem, block = str(exc), ""
        searched = True
    else:
        block = ""
    scopes = [(i, s.match) for i, s in enumerate(settings.file.scopes)]
    return render(
        request,
        "knowledge",
        page="knowledge",
        rows=rows,
        can_edit=can_edit,
        question=question,
        chosen=chosen,
        hits=hits,
        block=block,
        searched=searched,
        problem=problem,
        scopes=scopes,
        upload_max=UPLOAD_MAX_BYTES,
        suffixes=", ".join(sorted(TEXT_SUFFIXES)),
    )


async def _counted(
    store: KnowledgeStore, base: str, status: dict[str, Any] | None
) -> dict[str, Any] | None:
    index = await load_index(store, base)
    if index is None:
        return status
    return (status or {}) | {
        "chunks": len(index.chunks),
        "vectors": sum(1 for v in index.vectors if v),
        "model": index.model,
        "documents": len({c.source for c in index.chunks}),
        "version": index.version,
    }


async def search(
    src: Sources, settings: Settings, base: Base, question: str
) -> tuple[list[Any], str]:
    """What a message asking ``question`` in a place using ``base`` would retrieve: the hits
    with their scores, and the ``<knowledge>`` block they make. The parts are kept while the
    configuration stays (their cache holds each base's index, built once per version)."""
    recall = (await _searcher(settings, src.redis)).recall
    version = await KnowledgeStore(src.redis).version(base.id)
    query = None
    if recall.embedder is not None:
        [vector] = await recall.embedder.embed([question])
        query = unit(vector)
    hits = await recall.search(base.id, version, question, query, limit=SEARCH_LIMIT)
    return hits, recall.render_knowledge(hits)


_searchers: dict[tuple[int, int], tuple[Settings, RecallParts]] = {}


async def _searcher(settings: Settings, redis: Client) -> RecallParts:
    """The search's parts for this configuration and store (the previous ones closed)."""
    key = (id(settings), id(redis))
    found = _searchers.get(key)
    if found is not None and found[0] is settings:
        return found[1]
    old = list(_searchers.values())
    _searchers.clear()
    for _, parts in old:
        await parts.aclose()
    built = RecallParts.build(settings, redis)
    _searchers[key] = (settings, built)
    return built


async def index_now(src: Sources, sources: tuple[str, ...]) -> str:
    """Index the base over ``sources`` now, as ``chorus knowledge index`` does: what happened."""
    parts = RecallParts.build(await loaded.current(src), src.redis)
    try:
        if parts.indexer is None:  # the base is not in the configuration this process loaded
            return "not indexed: the configuration names no knowledge base yet"
        try:
            report = await parts.indexer.index(sources, force=True)
        except CostCapReached as exc:
            return f"not indexed: {exc}"
        state = "re-indexed" if report.changed else "unchanged"
        return f"{state}: {report.chunks} chunks from {report.sources} documents, {report.embedded} embedded"
    finally:
        await parts.aclose()


def check_upload(name: str, data: bytes) -> str:
    """Why ``data`` named ``name`` cannot be added ("" when it can)."""
    if not SAFE_NAME.fullmatch(name) or ".." in name:
        return "a file name of letters, digits, dots, dashes, underscores and spaces"
    suffix = Path(name).suffix.lower()
    if suffix not in TEXT_SUFFIXES:
        return f"a knowledge base reads {', '.join(sorted(TEXT_SUFFIXES))} files, not {suffix or 'this'}"
    if len(data) > UPLOAD_MAX_BYTES:
        return f"at most {UPLOAD_MAX_BYTES:,} bytes"
    if not data:
        return "an empty file"
    if suffix == ".pdf":
        return "" if data.startswith(b"%PDF-") else "this .pdf file is not a PDF"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return f"a {suffix} file must be UTF-8 text"
    return "a text file with NUL bytes is not text" if b"\0" in data else ""


def _write(folder: Path, name: str, data: bytes) -> Path:
    """``data`` as ``folder/name``, atomically (a reader sees the old file or the new one)."""
    handle, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".upload", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, folder / name)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return folder / name


async def upload(
    src: Sources, request: web.Request, audit: AuditFn, issue: Issue
) -> web.StreamResponse:
    form = await request.post()
    base = _find(await loaded.current(src), str(form.get("base", "")))
    folder = str(form.get("folder", "")) or (base.folders[0] if base.folders else "")
    if folder not in base.folders:
        raise web.HTTPSeeOther(
            f"/knowledge?{issue('not added: this knowledge base reads no folder to put a file in')}"
        )
    field = form.get("file")
    if not isinstance(field, web.FileField):
        raise web.HTTPSeeOther(f"/knowledge?{issue('not added: choose a file')}")
    name = Path(field.filename or "").name
    data = field.file.read(UPLOAD_MAX_BYTES + 1)
    why = check_upload(name, data)
    if why:
        raise web.HTTPSeeOther(f"/knowledge?{issue(f'{name} not added: {why}')}")
    await asyncio.to_thread(_write, Path(folder), name, data)
    audit(
        request,
        "knowledge:upload",
        "added",
        conversation=f"{folder}/{name}"[:200],
        detail=f"{len(data)} bytes",
    )
    await src.audit.flush()
    outcome = await index_now(src, base.sources)
    raise web.HTTPSeeOther(f"/knowledge?{issue(f'{name} added to {folder}; {outcome}')}")


async def reindex(
    src: Sources, request: web.Request, audit: AuditFn, issue: Issue
) -> web.StreamResponse:
    form = await request.post()
    base = _find(await loaded.current(src), str(form.get("base", "")))
    outcome = await index_now(src, base.sources)
    audit(request, "knowledge:index", "indexed", conversation=base.id, detail=outcome[:200])
    await src.audit.flush()
    raise web.HTTPSeeOther(f"/knowledge?{issue(f'{base.id} {outcome}')}")


async def add_url(
    src: Sources,
    request: web.Request,
    audit: AuditFn,
    issue: Issue,
    masked: Callable[[str], str],
    secrets: list[str],
) -> web.StreamResponse:
    """Append a URL to a scope's ``knowledge`` list in the file, checked as a start checks it."""
    form = await request.post()
    url, scope = str(form.get("url", "")).strip(), str(form.get("scope", ""))
    scopes = (await loaded.current(src)).file.scopes
    if (
        not url.startswith(("http://", "https://"))
        or not scope.isdigit()
        or int(scope) >= len(scopes)
    ):
        raise web.HTTPSeeOther(f"/knowledge?{issue('not added: an http(s) URL and a scope')}")
    path = config_path(src)
    if not path.is_file():
        raise web.HTTPConflict(text=f"no configuration file at {path}")
    text = path.read_text(encoding="utf-8")
    now = list(scopes[int(scope)].knowledge or ())
    if url in now:
        raise web.HTTPSeeOther(f"/knowledge?{issue('the scope reads that URL already')}")
    fields = {f"scope.{scope}.knowledge": "\n".join([*now, url])}
    try:
        new_text, changes = config_file.edit(text, fields, secrets)
    except ValueError as exc:
        raise web.HTTPSeeOther(f"/knowledge?{issue(f'not added: {exc}')}") from None
    checked, errors, rest = await asyncio.to_thread(config_file.check, path, new_text)
    if checked is None:
        why = "; ".join([*errors.values(), *rest])
        raise web.HTTPSeeOther(f"/knowledge?{issue(f'not added: {why}')}")
    await write_and_reload(src, request, audit, masked, checked, path, changes)
    raise web.HTTPSeeOther(
        f"/knowledge?{issue(f'{url} added to the scope; every process reloads it')}"
    )
