"""MCQ answer extraction: strict letters, option text, judge; unparsed is counted, never guessed."""

import pytest

from harness.scoring.parsing import parse_choice, parse_letter

OPTS = ["4", "the school bell rang", "a siren", "people leaving the building"]


@pytest.mark.parametrize(
    "reply, letter, method",
    [
        ("B. 4", "B", "letter"),
        ("ANSWER: B", "B", "letter"),
        ("(c)", "C", "letter"),
        ("b", "B", "letter"),
        ("**D**", "D", "letter"),
        ("The answer is (b)", "B", "letter"),
        ("I think the correct option is C because of the siren.", "C", "letter"),
        ("Answer: B because the bell rang", "B", "letter"),
        ("answer: d.", "D", "letter"),
        ("the school bell rang", "B", "option_text"),
        ("It was a siren.", "C", "option_text"),
        ("Answer: a siren", "C", "option_text"),  # 'a' here is the article, not option A
        ("4", "A", "option_text"),
    ],
)
def test_parses(reply, letter, method):
    p = parse_choice(reply, OPTS)
    assert (p.letter, p.method) == (letter, method)


@pytest.mark.parametrize(
    "reply",
    [
        "A or B",
        "A and C are wrong, B",
        "",
        "   ",
        "I cannot hear any audio.",
        "a siren or the school bell rang",
    ],
)
def test_unparsed_is_never_guessed(reply):
    p = parse_choice(reply, OPTS)
    assert p.letter is None and p.method == "unparsed"


def test_letters_beyond_the_options_do_not_count():
    assert parse_letter("E", 4) is None
    assert parse_letter("(e)", 5) == "E"


def test_judge_is_asked_only_when_the_layers_fail():
    calls = []

    def judge(q, options, reply):
        calls.append(reply)
        return "D" if "leaving" in reply else None

    assert parse_choice("B", OPTS, judge=judge).method == "letter"
    assert calls == []
    p = parse_choice("they were all leaving", OPTS, judge=judge)
    assert (p.letter, p.method) == ("D", "judge")
    assert parse_choice("no idea", OPTS, judge=judge).method == "unparsed"
