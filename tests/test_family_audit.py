"""Honest-reader audit: packets show one view per item and never a key; the scorer applies the
family design (a speech view keeps exactly its version's two keys, a slot family's speech keeps
all four, a scene view picks its key) and names every broken item."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import cli_process

from casu_dataset.families import audit as fa
from casu_dataset.families.compile import compile_families, families_of

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"
ROOT = Path(__file__).resolve().parents[1]


def _packets(tmp_path):
    scenes = compile_families(FIXTURE)
    counts = fa.write_packets(scenes, tmp_path, per_packet=5)
    return scenes, json.loads((tmp_path / "keys.json").read_text()), counts


def test_items_follow_the_family_design(tmp_path):
    scenes, keys, counts = _packets(tmp_path)
    fams = families_of(scenes)
    n_q = {f: len(v[0].questions) for f, v in fams.items()}
    views = {f: [k["view"] for k in keys.values() if k["family"] == f] for f in fams}
    slot, crossed = fams["fx_class_lineup"], fams["fx_go_or_stay"]
    # slot: one speech view (all four keys plausible), no sounds view, four scene views per question
    assert sorted(views["fx_class_lineup"]) == sorted(
        ["speech"] * n_q["fx_class_lineup"] + ["scene"] * 4 * n_q["fx_class_lineup"]
    )
    assert all(
        k["expect"] == list("ABCD")
        for k in keys.values()
        if k["family"] == "fx_class_lineup" and k["view"] == "speech"
    )
    # crossed: two speech views and two sounds views, each expecting exactly the two keys that share it
    c = [k for k in keys.values() if k["family"] == "fx_go_or_stay"]
    assert (
        sum(k["view"] == "speech" for k in c)
        == sum(k["view"] == "sounds" for k in c)
        == 2 * n_q["fx_go_or_stay"]
    )
    q0 = {sc.variant: sc.questions[0].answer for sc in crossed}
    task0 = crossed[0].questions[0].task
    go = next(k for k in c if k["view"] == "speech" and k["shows"] == "go" and k["task"] == task0)
    assert go["expect"] == sorted(q0[v] for v in q0 if v.startswith("go."))
    # scene views expect the compiled key of their variant
    for sc in slot + crossed:
        k = next(
            k
            for k in keys.values()
            if k["view"] == "scene"
            and k["shows"] == sc.variant
            and k["family"] == sc.family_id
            and k["task"] == sc.questions[0].task
        )
        assert k["expect"] == [sc.questions[0].answer]
    assert sum(counts.values()) == len(keys) and max(counts.values()) <= 5


def test_packets_never_show_a_key_a_role_or_a_fill_name(tmp_path):
    scenes, keys, _ = _packets(tmp_path)
    text = "".join(p.read_text() for p in tmp_path.glob("packet_*.md"))
    roles = {s.role for sc in scenes for s in sc.script.speakers}
    assert not any(f"({r})" in text or f"{r}:" in text for r in roles)
    rationales = {q.rationale for sc in scenes for q in sc.questions if len(q.rationale) > 10}
    assert "expect" not in text and not any(r in text for r in rationales)  # no key, no `why` line
    speech = (tmp_path / "packet_speech1.md").read_text()
    assert "Background" not in speech and "Sound event" not in speech  # a speech view shows no sound
    sounds = "".join(p.read_text() for p in tmp_path.glob("packet_sounds*.md"))
    assert "Voice" not in sounds  # a sounds view shows no speech


def _answer(tmp_path, keys, spoil=None):
    """A reader who follows the design exactly, except for the items `spoil` changes."""
    lines = []
    for iid, k in keys.items():
        a = {"id": iid, "pick": k["expect"][0]}
        if k["view"] == "scene":
            a.update(also=[], odd=False)
        else:
            a["plausible"] = list(k["expect"])
        if spoil:
            spoil(k, a)
        lines.append(json.dumps(a))
    (tmp_path / "answers_all.jsonl").write_text("\n".join(lines) + "\n")


def test_a_design_faithful_reader_scores_clean_and_each_break_is_named(tmp_path):
    _, keys, _ = _packets(tmp_path)
    _answer(tmp_path, keys)
    res = fa.score(tmp_path)
    assert res["problems"] == [] and res["speech"]["exact"] == res["speech"]["items"]
    assert res["scene"]["key_picked"] == res["scene"]["items"]

    def spoil(k, a):
        if k["view"] == "speech" and k["shows"] == "stay":  # the line rules out one fill
            a["plausible"] = a["plausible"][:1]
        if k["view"] == "scene" and k["shows"] == "bell":  # the reader finds another key
            a["pick"] = "D" if k["expect"][0] != "D" else "A"

    _answer(tmp_path, keys, spoil)
    res = fa.score(tmp_path)
    assert res["speech"]["single"] > 0 and res["scene"]["key_picked"] < res["scene"]["items"]
    assert any("fx_go_or_stay" in p and "speech:stay" in p for p in res["problems"])
    assert any("fx_class_lineup" in p and "scene:bell" in p for p in res["problems"])


def test_cli_exit_codes_and_unanswered_items(tmp_path):
    def cli(*a):
        return cli_process("casu_dataset", "audit", *a)

    r = cli("packets", str(tmp_path), "--scenarios", str(FIXTURE), "--families", "nope")
    assert r.returncode == 2 and "--families" in r.stderr and "nope" in r.stderr
    r = cli("score", str(tmp_path / "empty"))
    assert r.returncode == 2 and "keys.json" in r.stderr
    r = cli("packets", str(tmp_path), "--scenarios", str(FIXTURE))
    assert r.returncode == 0 and "packet_scene1.md" in r.stdout
    keys = json.loads((tmp_path / "keys.json").read_text())
    r = cli("score", str(tmp_path))
    assert r.returncode == 1 and f"{len(keys)} items have no answer" in r.stdout
    _answer(tmp_path, keys)
    (tmp_path / "answers_bad.jsonl").write_text("{not json\n")
    r = cli("score", str(tmp_path))
    assert r.returncode == 2 and "answers_bad.jsonl:1" in r.stderr
    (tmp_path / "answers_bad.jsonl").unlink()
    r = cli("score", str(tmp_path), "--out", str(tmp_path / "AUDIT.md"))
    assert r.returncode == 0 and "broken items (0)" in (tmp_path / "AUDIT.md").read_text()
