"""A PDF's text layer, page by page: the child process ``files.pdf_text`` runs and may kill.

Run as ``python -I pdftext.py MAX_CHARS`` with the PDF's bytes on stdin; writes its text (pages
apart as paragraphs, at most MAX_CHARS characters) to stdout as UTF-8, or one line on stderr
and a non-zero status. It imports nothing of Chorus, so the child starts with the interpreter
and pypdf alone, in isolated mode (no environment variables, no working directory on the path).
Why a process: extraction is pure Python that a crafted PDF can keep busy indefinitely (or fill
memory with), and only a process can be stopped from outside.
"""

from __future__ import annotations

import io
import sys


def main() -> int:
    limit = int(sys.argv[1])
    try:
        from pypdf import PdfReader
    except ImportError:
        print("reading PDF needs pypdf: pip install 'chorus-bot[pdf]'", file=sys.stderr)
        return 3
    try:
        reader = PdfReader(io.BytesIO(sys.stdin.buffer.read()))
        texts: list[str] = []
        size = 0
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            if text:
                texts.append(text)
                size += len(text) + 2
            if size >= limit:
                break
    except Exception as exc:  # a malformed PDF: one line for the parent's log
        print(f"unreadable PDF: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write("\n\n".join(texts)[:limit].encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
