"""Splitting long answers: limits, boundaries, and code blocks that stay valid per piece."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.platform.textsplit import split_text


def _fences_balanced(piece: str) -> bool:
    return sum(1 for line in piece.split("\n") if line.strip().startswith("```")) % 2 == 0


def test_short_text_is_one_piece() -> None:
    assert split_text("  hello  ", 2000) == ["hello"]
    assert split_text("", 2000) == []


def test_prefers_paragraph_then_sentence_boundaries() -> None:
    text = ("First sentence here. " * 10).strip() + "\n\n" + ("Second para. " * 10).strip()
    pieces = split_text(text, 250)
    assert pieces[0].endswith("First sentence here.")
    assert pieces[1].startswith("Second para.")


def test_sentences_when_there_is_no_newline() -> None:
    text = " ".join(f"Sentence number {i} ends here." for i in range(40))
    pieces = split_text(text, 200)
    assert all(len(p) <= 200 for p in pieces)
    assert all(p.endswith(".") for p in pieces)
    assert " ".join(pieces) == text


def test_five_thousand_characters_with_a_code_block_fit_discord() -> None:
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(110))
    text = "Here is the script:\n\n```python\n" + code + "\n```\n\n" + "Explanation. " * 80
    assert len(text) > 5000
    pieces = split_text(text, 2000)
    assert len(pieces) >= 3
    for piece in pieces:
        assert len(piece) <= 2000
        assert _fences_balanced(piece), piece
    continued = [p for p in pieces[1:] if p.startswith("```python")]
    assert continued, "a split code block re-opens with its language tag"
    joined = "\n".join(pieces)
    for i in range(110):
        assert f"value_{i} = compute({i})" in joined


def test_a_giant_word_is_cut_only_as_a_last_resort() -> None:
    pieces = split_text("x" * 450, 200)
    assert [len(p) for p in pieces] == [196, 196, 58]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="abc .!?\n", min_size=1, max_size=300),
            st.builds(lambda body: f"```py\n{body}\n```", st.text(alphabet="xy =\n", max_size=400)),
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(min_value=40, max_value=500),
)
def test_every_piece_fits_and_keeps_fences_balanced(parts: list[str], limit: int) -> None:
    text = "\n".join(parts)
    pieces = split_text(text, limit)
    for piece in pieces:
        assert len(piece) <= limit
        assert _fences_balanced(piece)
    # Nothing but whitespace and added fences is lost.
    kept = "".join(p.replace("```py", "").replace("```", "") for p in pieces)
    original = text.replace("```py", "").replace("```", "")
    assert "".join(kept.split()) == "".join(original.split())


def test_a_tilde_block_is_closed_with_tildes_and_reopened_with_its_tag() -> None:
    body = "\n".join(f"line {n} of the tilde block" for n in range(40))
    pieces = split_text(f"Here:\n~~~python\n{body}\n~~~\nDone.", 300)
    assert len(pieces) > 2
    for piece in pieces[:-1]:
        assert piece.endswith("\n~~~"), piece[-40:]
        assert "```" not in piece
    for piece in pieces[1:-1]:
        assert piece.startswith("~~~python\n")
    assert (
        "".join(p.replace("~~~python", "").replace("~~~", "") for p in pieces).count("line ") == 40
    )


def test_backticks_inside_a_tilde_block_are_code_not_a_fence() -> None:
    inner = "\n".join(["```", "not a fence", "```"] * 15)
    pieces = split_text(f"~~~\n{inner}\n~~~\nafter", 120)
    assert len(pieces) > 2
    for piece in pieces[:-1]:
        assert piece.endswith("\n~~~")  # the tilde block is what is open, whatever ``` says
    assert pieces[-1].endswith("after")


def test_a_four_backtick_block_is_closed_with_four() -> None:
    body = "\n".join(["```js", "let x = 1", "```"] * 20)
    pieces = split_text(f"````md\n{body}\n````", 200)
    assert len(pieces) > 2
    for piece in pieces:
        assert len(piece) <= 200
    for piece in pieces[:-1]:
        assert piece.endswith("\n````")
    for piece in pieces[1:]:
        assert piece.startswith("````md\n")
