"""A knowledge base's files and folders: listed without leaving them, read within its bounds.

A folder in a knowledge list is often synced from a repository that others send changes to, so
what is inside it is not the operator's word: a pull request adding ``faq.md -> ../../.env``
would let every chat user read the bot's secrets through the knowledge block or
``search_knowledge``. So every source has a root, and nothing outside the root is read:

- a folder named in the list is its own root, resolved once (the operator wrote that path,
  symlinks in it included); a file named in the list has its folder as root and is itself held
  to the rules below, since a synced folder can replace that file too;
- a symlink inside a root is skipped unless CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS=true, and even
  then its target must resolve under the root; a linked folder is walked once, so a loop ends;
- only regular files are read, and the file read is the file checked: it is opened without
  following a final symlink and must have the device and inode seen when it was listed, so a
  swap between listing and reading reads nothing;
- a document is named by its path under the root, prefixed with the root's own name
  (``docs/guides/voice.md``; a named file by its file name), never an absolute path: the name
  is what the model and the chat see.

Bounds (``Budget``, one per base and pass, shared with the base's URLs):
CHORUS_KNOWLEDGE_MAX_FILES documents and CHORUS_KNOWLEDGE_MAX_BYTES bytes of sources; the first
document that does not fit ends the base's listing, in one warning naming the setting. A PDF's
text is extracted by a child process (``pdftext.py``) that is killed after
CHORUS_KNOWLEDGE_PDF_TIMEOUT seconds: a crafted PDF can keep pypdf busy as long as it likes, and
a thread cannot be stopped.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

log = logging.getLogger("chorus.knowledge")

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".pdf"})
MAX_FILE_BYTES = 5_000_000  # one file; larger ones are skipped alone
MAX_PDF_TEXT = 5_000_000  # characters of text taken from one PDF
_PDF_SCRIPT = Path(__file__).with_name("pdftext.py")
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True)
class Listed:
    """One file to read: ``name`` as shown, its freshness ``mark``, and what was checked."""

    name: str
    mark: str
    path: Path  # resolved, under the root
    identity: tuple[int, int]  # (st_dev, st_ino) when listed
    pdf: bool


class Budget:
    """What one base may still take in this pass; once a document does not fit, nothing more."""

    def __init__(self, base: str, max_files: int, max_bytes: int) -> None:
        self.base = base
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.files = 0
        self.bytes = 0
        self.full = False

    def take(self, name: str, size: int) -> bool:
        """Count a document of ``size`` bytes; False (and one warning) when it does not fit."""
        if self.full:
            return False
        if self.files >= self.max_files:
            self._reached("CHORUS_KNOWLEDGE_MAX_FILES", self.max_files, name)
            return False
        if self.bytes + size > self.max_bytes:
            self._reached("CHORUS_KNOWLEDGE_MAX_BYTES", self.max_bytes, name)
            return False
        self.files += 1
        self.bytes += size
        return True

    def _reached(self, setting: str, limit: int, name: str) -> None:
        self.full = True
        log.warning(
            "knowledge base limit reached; this document and the rest are skipped",
            extra={"base": self.base, "setting": setting, "limit": limit, "document": name},
        )


def list_source(source: str, *, follow: bool, budget: Budget) -> list[Listed]:
    """The documents of a file or folder ``source`` that may be read, within ``budget``."""
    given = Path(source).expanduser()
    if given.is_dir():
        root = given.resolve(strict=True)
        walked = _walk(root, follow)
    elif given.is_file() or given.is_symlink():
        root = given.parent.resolve(strict=True)
        walked = iter([(root / given.name, given.name)])
    else:
        raise FileNotFoundError(f"{source}: no such file or folder")
    found = []
    for path, name in walked:
        if budget.full:
            break
        item = _check(path, name, root, follow=follow)
        if item is not None and budget.take(name, item[1].st_size):
            real, info = item
            mark = f"{info.st_mtime_ns}:{info.st_size}"
            pdf = path.suffix.lower() == ".pdf"
            found.append(Listed(name, mark, real, (info.st_dev, info.st_ino), pdf))
    return found


def _walk(root: Path, follow: bool) -> Iterator[tuple[Path, str]]:
    """``(path, name)`` of each candidate file under ``root``: a folder's files (sorted), then
    its folders'. Symlinks to folders are entered only when ``follow``, each folder once."""
    seen = {root}
    stack = [root]
    prefix = PurePosixPath(root.name) if root.name else PurePosixPath()
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            log.warning("knowledge folder unreadable; skipped", extra={"error": str(exc)})
            continue
        subfolders = []
        for entry in entries:
            path = Path(entry.path)
            name = str(prefix / path.relative_to(root).as_posix())
            if entry.is_symlink() and not follow:
                _skip(name, "a symlink (CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS is off)")
            elif entry.is_dir(follow_symlinks=follow):
                real = _inside(path, name, root)
                if real is not None and real not in seen:
                    seen.add(real)
                    subfolders.append(path)
            elif path.suffix.lower() in TEXT_SUFFIXES:
                yield path, name
        stack.extend(reversed(subfolders))


def _inside(path: Path, name: str, root: Path) -> Path | None:
    """``path`` resolved, if it exists and stays under ``root``; else None, logged."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # a broken link, a link loop
        _skip(name, f"cannot be resolved ({type(exc).__name__})")
        return None
    if not real.is_relative_to(root):
        _skip(name, "it leads outside its knowledge folder")
        return None
    return real


def _check(
    path: Path, name: str, root: Path, *, follow: bool
) -> tuple[Path, os.stat_result] | None:
    """The resolved path and ``lstat`` of a file that may be read; None (logged) otherwise."""
    if path.is_symlink() and not follow:
        _skip(name, "a symlink (CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS is off)")
        return None
    real = _inside(path, name, root)
    if real is None:
        return None
    try:
        info = os.stat(real, follow_symlinks=False)
    except OSError as exc:  # gone since it was listed
        _skip(name, f"cannot be read ({type(exc).__name__})")
        return None
    if not stat.S_ISREG(info.st_mode):
        _skip(name, "not a regular file")
        return None
    if info.st_size > MAX_FILE_BYTES:
        _skip(name, f"larger than {MAX_FILE_BYTES} bytes")
        return None
    return real, info


def _skip(name: str, why: str) -> None:
    log.warning("knowledge file skipped", extra={"document": name, "reason": why})


def read_listed(item: Listed, *, pdf_timeout: float) -> str:
    """The text of ``item``, read from the very file that was listed. Raises ``OSError`` if it
    changed, ``UnicodeDecodeError``, or ``RuntimeError`` for a PDF that cannot be read."""
    fd = os.open(item.path, _OPEN_FLAGS)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != item.identity:
            raise OSError(f"{item.name} changed while it was read")
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"{item.name} grew past {MAX_FILE_BYTES} bytes")
    return pdf_text(data, item.name, pdf_timeout) if item.pdf else data.decode("utf-8")


def pdf_text(data: bytes, name: str, timeout: float) -> str:
    """A PDF's text layer, extracted by a child process given ``timeout`` seconds."""
    command = [sys.executable, "-I", str(_PDF_SCRIPT), str(MAX_PDF_TEXT)]
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"{name}: text extraction took longer than {timeout:g} s (CHORUS_KNOWLEDGE_PDF_TIMEOUT)"
        ) from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"{name}: {said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout.decode("utf-8")
