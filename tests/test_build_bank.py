"""scripts/build_bank.py --add: added sources are appended to a committed bank without
touching its existing clips; repeats of a bank recording and clips without a mapping row are dropped."""

import csv
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BANK = ROOT / "casu_dataset" / "sounds" / "bank"
KEEP = ["ev__owl_hoot__owl", "ev__pig_grunt__pig"]  # a small committed bank
NEW = "ev__owl_hoot__owl-tuxpaint"  # captioned in scripts/bank_captions.txt


@pytest.fixture
def build_bank(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_bank", ROOT / "scripts" / "build_bank.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "bank"
    (out / "audio").mkdir(parents=True)
    (out / "licenses").mkdir()
    manifest = json.loads((BANK / "manifest.json").read_text())
    manifest["clips"] = [c for c in manifest["clips"] if c["id"] in KEEP]
    manifest["num_clips"] = len(manifest["clips"])
    for c in manifest["clips"]:
        shutil.copy(BANK / c["file"], out / c["file"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    monkeypatch.setattr(mod, "OUT", out)
    return mod


def write_sources(d: Path) -> Path:
    """Three clips: one new recording (with a per-file author), one that repeats the bank's gcompris
    owl (filed under a captioned name), one without a mapping row. The audio is a real bank clip."""
    (d / "clips").mkdir(parents=True)
    (d / "copyright").mkdir()
    shutil.copy(
        BANK / "licenses" / "tuxpaint-stamps-default.txt", d / "copyright" / "tuxpaint-stamps-default.txt"
    )
    audio = BANK / "audio" / "ev__owl_hoot__owl.ogg"
    for stem in (NEW, "ev__owl_hoot__owl-megaglest", "ev__owl_hoot__unlisted"):
        shutil.copy(audio, d / "clips" / f"{stem}.ogg")
    owl = next(
        c for c in json.loads((BANK / "manifest.json").read_text())["clips"] if c["id"] == "ev__owl_hoot__owl"
    )
    rows = [
        {
            "kind": "event",
            "type": "owl_hoot",
            "clip": "owl-tuxpaint",
            "debian_package": "tuxpaint-stamps-default",
            "path_in_package_or_container": "usr/share/tuxpaint/stamps/animals/birds/owl.ogg",
            "license_summary": "CC0-1.0 (upstream README)",
            "author": "A. Recordist",
        },
        {
            "kind": "event",
            "type": "owl_hoot",
            "clip": "owl-megaglest",
            "debian_package": owl["source_package"],
            "path_in_package_or_container": owl["source_path"],
            "license_summary": "GPL-3+",
            "author": "",
        },
    ]
    with open(d / "mapping.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return d


def test_add_appends_new_clips_and_leaves_the_bank_as_it_was(build_bank, tmp_path):
    out = build_bank.OUT
    before = json.loads((out / "manifest.json").read_text())
    audio_before = {p.name: p.read_bytes() for p in (out / "audio").iterdir()}
    build_bank.add(write_sources(tmp_path / "src"))
    after = json.loads((out / "manifest.json").read_text())
    assert after["clips"][: len(KEEP)] == before["clips"]
    assert {
        p.name: p.read_bytes() for p in (out / "audio").iterdir() if p.name in audio_before
    } == audio_before
    new = after["clips"][len(KEEP) :]
    assert [c["id"] for c in new] == [NEW]
    c = new[0]
    assert (c["author"], c["license"], c["type"]) == ("A. Recordist", "CC0-1.0 (upstream README)", "owl_hoot")
    assert c["caption"] == "An owl gives a single hoot." and 3 <= len(c["keywords"]) <= 8
    assert (out / c["file"]).exists() and (out / "licenses" / "tuxpaint-stamps-default.txt").exists()
    reasons = {d["file"]: d["reason"] for d in after["dropped"][len(before["dropped"]) :]}
    assert reasons == {
        "ev__owl_hoot__owl-megaglest.ogg": "same source recording as ev__owl_hoot__owl",
        "ev__owl_hoot__unlisted.ogg": "no row in mapping.csv",
    }
    assert after["num_clips"] == len(KEEP) + 1 and after["num_dropped"] == len(after["dropped"])
    assert f"| {NEW} | tuxpaint-stamps-default |" in (out / "ATTRIBUTION.md").read_text()
    # Adding the same folder again changes nothing: its clips are in the bank or dropped already.
    build_bank.add(tmp_path / "src")
    assert json.loads((out / "manifest.json").read_text()) == after


def test_labels_rewrites_caption_and_type_but_never_the_audio(build_bank, tmp_path, monkeypatch):
    out = build_bank.OUT
    audio_before = {p.name: p.read_bytes() for p in (out / "audio").iterdir()}
    captions = tmp_path / "captions.txt"
    captions.write_text(
        "ev__owl_hoot__owl | A tawny owl hoots twice at night. | owl, hoot, night\n"
        "ev__pig_grunt__pig | A pig grunts. | pig, grunt, farm\n"
    )
    monkeypatch.setattr(
        build_bank,
        "read_captions",
        lambda: {
            s: (c, [k.strip() for k in kw.split(",")])
            for s, c, kw in (map(str.strip, line.split("|")) for line in captions.read_text().splitlines())
        },
    )
    monkeypatch.setattr(build_bank, "read_retype", lambda: {"ev__pig_grunt__pig": "farm_pig"})
    build_bank.relabel()
    clips = {c["id"]: c for c in json.loads((out / "manifest.json").read_text())["clips"]}
    assert clips["ev__owl_hoot__owl"]["caption"] == "A tawny owl hoots twice at night."
    assert clips["ev__owl_hoot__owl"]["type"] == "owl_hoot"  # the file name's type when not retyped
    assert clips["ev__pig_grunt__pig"]["type"] == "farm_pig"
    assert {p.name: p.read_bytes() for p in (out / "audio").iterdir()} == audio_before
    # A retype of a clip the bank does not hold is an error naming the file, not a silent no-op.
    monkeypatch.setattr(build_bank, "read_retype", lambda: {"ev__nope__x": "t"})
    with pytest.raises(SystemExit, match="bank_retype.json: not a bank clip: ev__nope__x"):
        build_bank.relabel()
