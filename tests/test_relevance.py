"""The relevance score: stop words, stemming, IDF weighting, the first-words boost, thresholds
and caps."""

from __future__ import annotations

import pytest

from bot.memory.relevance import (
    FIRST_WORDS_BOOST,
    MAX_QUERY_TERMS,
    Scorer,
    jaccard,
    select,
    stem,
    terms,
)


@pytest.mark.parametrize(
    "words",
    [
        ("vegan", "vegans", "veganism"),
        ("run", "runs", "running", "runner"),
        ("like", "likes", "liked", "liking"),
        ("city", "cities"),
        ("study", "studies", "studied", "studying"),
        ("class", "classes"),
        ("python", "pythons"),
    ],
)
def test_inflections_share_a_stem(words: tuple[str, ...]) -> None:
    assert len({stem(word) for word in words}) == 1, {word: stem(word) for word in words}


@pytest.mark.parametrize("word", ["status", "bus", "cat", "über", "東京", "c3po"])
def test_short_and_non_english_words_are_left_alone(word: str) -> None:
    assert stem(word) == word


def test_stop_words_and_noise_are_not_terms() -> None:
    assert terms("Is the user a person? Yes, please! ok") == []
    assert terms("I love the VEGAN food, vegan!") == ["lov", "vegan", "food"]
    assert terms("a 42 x 2024") == ["2024"]


def test_jaccard() -> None:
    assert jaccard(["a", "b"], ["b", "c"]) == pytest.approx(1 / 3)
    assert jaccard([], []) == 1.0


NOTES = ["Is vegan", "Lives in Lyon", "Plays chess on weekends"]


def test_a_note_sharing_the_topic_scores_and_others_do_not() -> None:
    scorer = Scorer("any good veganism recipes for tonight?", NOTES)
    assert scorer.score("Is vegan") > 0.1
    assert scorer.score("Lives in Lyon") == 0
    assert scorer.score("Plays chess on weekends") == 0


def test_shared_stop_words_score_nothing() -> None:
    # The reference's plain word overlap would match "is" and "the" here.
    scorer = Scorer("what is the plan for the weekend", ["Is the best at this"])
    assert scorer.score("Is the best at this") == 0


def test_a_word_in_every_note_weighs_less_than_a_rare_one() -> None:
    notes = ["Writes python scripts", "Teaches python", "Plays chess"]
    scorer = Scorer("python chess", notes)
    assert scorer.score("Plays chess") > scorer.score("Teaches python") > 0


def test_the_first_words_boost() -> None:
    # "vegan" and "lyon" are equally rare, but only "vegan" is among the first three terms.
    scorer = Scorer("vegan restaurant options downtown tonight lyon", NOTES)
    vegan, lyon = scorer.score("Is vegan"), scorer.score("Lives in Lyon")
    assert vegan - lyon == pytest.approx(FIRST_WORDS_BOOST)
    assert lyon > 0


def test_scores_are_bounded() -> None:
    scorer = Scorer("vegan", NOTES)
    assert scorer.score("Is vegan") == pytest.approx(1 + FIRST_WORDS_BOOST)
    assert Scorer("", NOTES).score("Is vegan") == 0
    assert Scorer("the and of", NOTES).score("Is vegan") == 0


def test_only_the_first_query_terms_count() -> None:
    filler = " ".join(f"word{n}x" for n in range(MAX_QUERY_TERMS))
    assert Scorer(f"{filler} vegan", NOTES).score("Is vegan") == 0
    assert Scorer(f"vegan {filler}", NOTES).score("Is vegan") > 0


def test_select_applies_threshold_cap_and_order() -> None:
    notes = ["Likes jazz", "Likes jazz piano", "Plays jazz piano in a band", "Lives in Lyon"]
    scorer = Scorer("any jazz piano concerts?", notes)
    chosen = select(scorer, notes, lambda n: n, threshold=0.1, limit=2)
    assert [c.item for c in chosen] == ["Likes jazz piano", "Plays jazz piano in a band"]
    assert chosen[0].score >= chosen[1].score
    everything = select(scorer, notes, lambda n: n, threshold=0.0, limit=10)
    assert "Lives in Lyon" not in [c.item for c in everything], "a zero score never passes"
    best = everything[0].score
    assert select(scorer, notes, lambda n: n, threshold=best, limit=10) == [], "strictly above"
    assert select(scorer, notes, lambda n: n, threshold=0.1, limit=0) == []


def test_ties_keep_the_callers_order() -> None:
    notes = ["Loves jazz", "Plays jazz", "Hates jazz"]
    scorer = Scorer("jazz", notes)
    assert [c.item for c in select(scorer, notes, str, threshold=0, limit=3)] == notes
    reversed_notes = notes[::-1]
    assert [c.item for c in select(scorer, reversed_notes, str, threshold=0, limit=3)] == (
        reversed_notes
    )
