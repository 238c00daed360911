"""CASU-mini: coverage, balance, minimal pairs, validation errors and blind baselines."""

from collections import Counter

import pytest

from casu_dataset.families.blind import (
    BLIND_TARGET,
    accuracy,
    coverage,
    embedding_chooser,
    length_heuristics,
    lm_chooser,
)
from casu_dataset.legacy.library import (
    LETTERS,
    TASKS,
    LibraryError,
    compile_library,
)
from casu_dataset.script.scenes import all_questions


@pytest.fixture(scope="module")
def scenes():
    return compile_library()


def test_coverage_targets(scenes):
    cov = coverage(scenes)
    assert cov["scenes"] >= 80 and cov["places"] >= 15 and cov["event_types"] >= 40
    mono = cov["per_speech_type"]["monologue"] / cov["scenes"]
    assert 0.4 <= mono <= 0.6
    assert cov["minimal_pairs"] >= 25
    for s in scenes:
        if not s.variant_of:
            assert {q.task for q in s.questions} == set(TASKS), s.script.id
            assert len(s.description) > 80
        for q in s.questions:
            assert len(q.options) == 4 and q.answer in LETTERS and q.rationale and q.layers


def test_answer_letters_balanced(scenes):
    qs = all_questions(scenes)
    share = {k: v / len(qs) for k, v in Counter(q.answer for q in qs).items()}
    assert set(share) == set(LETTERS) and all(0.20 <= v <= 0.30 for v in share.values()), share


def test_minimal_pairs_swap_one_non_speech_layer_and_change_the_key(scenes):
    by_id = {s.script.id: s for s in scenes}
    variants = [s for s in scenes if s.variant_of]
    assert len(variants) >= 25
    for v in variants:
        base = by_id[v.variant_of]
        assert v.script.turns == base.script.turns and v.script.speakers == base.script.speakers
        ev_changed = [a.id for a, b in zip(base.script.events, v.script.events) if a != b]
        bg_changed = base.script.background != v.script.background
        assert (len(ev_changed) == 1) != bg_changed, v.script.id  # exactly one layer swapped
        (vq,) = v.questions
        bq = next(q for q in base.questions if q.minimal_pair_id == vq.minimal_pair_id)
        assert vq.question == bq.question and vq.options == bq.options and vq.answer != bq.answer


def _write(tmp_path, text):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


GOOD = """
- id: s1
  types: {background: rain, bell: electric_bell_ring}
  script:
    place: school
    speech_type: monologue
    background: {description: Rain falls., keywords: [rain]}
    speakers: [{id: t, role: teacher, gender: female}]
    turns: [{speaker: t, text: "Time to go."}]
    events: [{id: bell, description: A bell rings., keywords: [bell], anchor: {type: after_turn, turn: 0}}]
  description: A teacher says it is time to go after a bell rings while rain falls outside the window today.
  questions:
%s
"""
Q = (
    '    - {id: %s, task: %s, q: "Q?", correct: "right", distractors: ["w1", "w2", "w3"], why: "cue", '
    "layers: [event]}"
)


def test_scenarios_may_ask_any_subset_of_tasks_with_letters_balanced_per_task(tmp_path):
    # Three scenarios: one asks two tasks, one a single task, one all four; none is skipped.
    one = (GOOD % "\n".join(Q % (t, t) for t in TASKS[:2])).strip("\n")
    two = (GOOD % (Q % (TASKS[0], TASKS[0]))).replace("id: s1", "id: s2").strip("\n")
    three = (GOOD % "\n".join(Q % (t, t) for t in TASKS)).replace("id: s1", "id: s3").strip("\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.yaml").write_text("\n".join([one, two, three]) + "\n")
    skipped = []
    scenes = compile_library(tmp_path / "lib", skipped)
    assert skipped == [] and [len(s.questions) for s in scenes] == [2, 1, 4]
    by_task = {}
    for q in all_questions(scenes):
        by_task.setdefault(q.task, []).append(q.answer)
    assert sorted(by_task[TASKS[0]]) == ["A", "B", "C"]  # 3 questions of one task: 3 distinct letters
    assert {len(v) for k, v in by_task.items() if k != TASKS[0]} == {1, 2}


def test_library_errors_name_file_and_scenario(tmp_path):
    four = "\n".join(Q % (t, t) for t in TASKS)
    assert len(compile_library(_write(tmp_path, GOOD % four))) == 1
    bad_pair = (
        GOOD % four
        + """  pair: {id: s1b, swap: {event: bell, description: A siren., keywords: [siren], type: siren},
          description: A variant., question: contextual_reasoning, correct: "not an option", why: x}
"""
    )
    with pytest.raises(
        LibraryError,
        match=r"pair s1b: correct: 'not an option' is not one of question contextual_reasoning.s options",
    ):
        compile_library(_write(tmp_path, bad_pair))
    with pytest.raises(LibraryError, match=r"scenario s1: .*turns\[0\].speaker: unknown speaker"):
        compile_library(_write(tmp_path, (GOOD % four).replace("{speaker: t,", "{speaker: x,")))


def test_blind_embedding_and_length_baselines_near_chance(scenes):
    from casu_dataset.sounds.retrieval import Embedder

    qs = all_questions(scenes)
    assert accuracy(qs, embedding_chooser(qs, Embedder())) <= BLIND_TARGET
    for name, choice in length_heuristics(qs).items():
        assert accuracy(qs, choice) <= BLIND_TARGET, name


def test_lm_blind_baseline_runs_on_real_smollm2(scenes):
    from casu_dataset.core.llm.local import LocalLM
    from casu_dataset.families.blind import BLIND_SYSTEM

    lm = LocalLM()
    qs = all_questions(scenes)[:6]
    mean, total = lm_chooser(qs, lm)
    assert mean.shape == total.shape == (6,)
    # each choice is the option the real model scores best from the question alone: by mean
    # log-prob per token, and by summed log-prob
    for q, m, t in zip(qs, mean, total):
        lps = lm.option_logprobs(
            [{"role": "system", "content": BLIND_SYSTEM}, {"role": "user", "content": q.question}], q.options
        )
        assert len(lps) == 4 and all(lp < 0 and n > 0 for lp, n in lps), lps
        per_token = [lp / n for lp, n in lps]
        assert per_token[m] == max(per_token) and lps[t][0] == max(lp for lp, _ in lps), (q.id, lps, m, t)


def test_every_layer_is_realisable_with_the_bank(scenes, tmp_path):
    from casu_dataset.families.blind import realisability
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Retriever

    assert realisability(scenes, Retriever(Catalog.embedded(), cache_dir=tmp_path)) == []
