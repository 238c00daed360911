"""Speech layer: real synthesis with Piper and flite, voice assignment, pitch separation,
the turn cache, and the Whisper intelligibility check on real audio."""

from dataclasses import replace

import numpy as np
import pytest

from casu_dataset.script.schema import parse_script
from casu_dataset.speech.engines import EngineError, FliteEngine, get_engine
from casu_dataset.speech.intelligibility import WhisperChecker, normalize, wer
from casu_dataset.speech.layer import (
    MIN_SEMITONES,
    SpeechSynth,
    TurnTooLongError,
    VoiceAssignmentError,
    assign_voices,
    build_speech_layer,
)
from casu_dataset.speech.pitch import median_f0, semitones
from casu_dataset.speech.voices import Voice, VoiceRegistry, derive, speak

SENT = "Please keep your seatbelt fastened while the sign is on."


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return SpeechSynth(tmp_path_factory.mktemp("tts"))


@pytest.fixture(scope="module")
def checker():
    return WhisperChecker()


def convo(**sp):
    a = {"id": "A", "role": "doctor", "gender": "female"}
    b = {"id": "B", "role": "patient", "gender": "female"}
    a.update(sp.get("a", {}))
    b.update(sp.get("b", {}))
    return parse_script(
        {
            "id": sp.get("id", "clinic"),
            "place": "clinic",
            "speech_type": "conversation",
            "background": {"description": "a quiet waiting room", "keywords": ["room"]},
            "speakers": [a, b],
            "turns": [
                {"speaker": "A", "text": "How are you feeling today?"},
                {"speaker": "B", "text": "Much better, thank you."},
            ],
        }
    )


@pytest.mark.parametrize("vid,sr", [("piper-joe", 22050), ("flite-slt", 16000), ("flite-kal16", 16000)])
def test_real_synthesis_per_engine(vid, sr):
    audio, rate = speak(SENT, VoiceRegistry()[vid])
    assert rate == sr and audio.dtype == np.float32
    assert 1.5 < audio.shape[0] / rate < 8.0 and np.max(np.abs(audio)) > 0.05


def test_registry_has_twelve_identities_four_female():
    reg = VoiceRegistry()
    assert len(reg.voices) >= 12
    assert sum(v.gender == "female" for v in reg.voices) >= 4
    assert len({v.id for v in reg.voices}) == len(reg.voices)
    assert any(v.age == "child" for v in reg.voices)


def test_derived_voice_shifts_pitch_as_documented():
    base = VoiceRegistry()["flite-slt"]
    d = derive(base, seed=3)
    assert d == derive(base, seed=3) and d.id != base.id  # stable
    a, sr = speak(SENT, base)
    b, sr2 = speak(SENT, d)
    measured = 12 * np.log2(median_f0(b, sr2) / median_f0(a, sr))
    assert measured == pytest.approx(d.pitch_st, abs=0.7)
    # tempo restores duration: the length changes by the tempo factor only
    assert b.shape[0] / a.shape[0] == pytest.approx(1 / d.tempo, rel=0.08)


def test_assignment_is_deterministic_and_fits_the_script(synth):
    reg = VoiceRegistry()
    s = convo(a={"gender": "male"}, b={"age": "child", "role": "daughter"})
    v1 = assign_voices(s, reg, seed=4, synth=synth)
    assert v1 == assign_voices(s, reg, seed=4, synth=synth)
    assert v1["A"].gender == "male" and v1["A"].age == "adult"
    assert v1["B"].age == "child"
    assert v1["A"].base_id != v1["B"].base_id
    seen = {assign_voices(convo(id=f"s{i}"), reg, seed=0, synth=synth)["A"].id for i in range(12)}
    assert len(seen) > 1  # different scenes draw different voices


def test_fixed_voice_and_unknown_voice(synth):
    reg = VoiceRegistry()
    v = assign_voices(convo(a={"voice": "flite-slt-b"}), reg, 0, synth)
    assert v["A"].id == "flite-slt-b"
    with pytest.raises(VoiceAssignmentError, match="speaker A: unknown voice 'nope'"):
        assign_voices(convo(a={"voice": "nope"}), reg, 0, synth)


def test_forced_shared_base_requires_three_semitones(synth):
    slt = VoiceRegistry()["flite-slt"]
    close = replace(slt, id="slt-close", pitch_st=1.0)
    far = replace(slt, id="slt-far", pitch_st=4.0)
    reg = VoiceRegistry([slt, close, far])
    for seed in range(4):
        v = assign_voices(convo(), reg, seed, synth)
        gap = semitones(synth.voice_pitch(v["A"]), synth.voice_pitch(v["B"]))
        assert gap >= MIN_SEMITONES, (v, gap)
    with pytest.raises(VoiceAssignmentError, match="every pair of candidate voices is within 3.0 semitones"):
        assign_voices(convo(), VoiceRegistry([slt, close]), 0, synth)


def test_turn_cache_hits_and_keys(synth):
    v = VoiceRegistry()["flite-rms"]
    p1 = synth.synthesize("The kettle is on.", v)
    h = synth.hits
    assert synth.synthesize("The kettle is on.", v) == p1 and synth.hits == h + 1
    assert synth.synthesize("The kettle is off.", v) != p1
    assert synth.synthesize("The kettle is on.", VoiceRegistry()["flite-awb"]) != p1


def test_intelligibility_on_real_speech(synth, checker):
    p = synth.synthesize(SENT, VoiceRegistry()["flite-slt"])
    good = checker.check_file(p, SENT)
    assert good["wer"] < 0.25 and "seatbelt" in good["transcript"].lower().replace(" ", "")
    bad = checker.check_file(p, "The lion sleeps tonight in the jungle.")
    assert bad["wer"] > 0.8
    assert normalize("It's 12 o'clock, Dr. Lee!") == normalize("it is twelve o'clock doctor lee")
    assert wer("the cat sat down", "The cat sat.") == pytest.approx(0.25)


def test_failed_check_reassigns_then_flags(synth, checker):
    s = convo()
    layer = build_speech_layer(s, VoiceRegistry(), 0, synth, checker, max_wer=-1.0, max_attempts=2)
    assert layer.attempts == 2 and all(c["flagged"] for c in layer.checks)
    ok = build_speech_layer(s, VoiceRegistry(), 0, synth, checker, max_wer=0.5)
    assert ok.attempts == 1 and not any(c["flagged"] for c in ok.checks)
    assert {v.id for v in layer.voices.values()} != {v.id for v in ok.voices.values()}


def test_bad_input_names_turn_or_engine(synth):
    reg = VoiceRegistry()
    with pytest.raises(EngineError, match="empty text"):
        speak("  ", reg["flite-slt"])
    with pytest.raises(EngineError, match="nothing pronounceable"):
        speak("?!... —", reg["flite-slt"], "turns[2]")

    class Missing(FliteEngine):
        binary = "flite-not-installed"

    with pytest.raises(EngineError, match="flite: the `flite-not-installed` binary is not installed"):
        Missing().synthesize("hello", "slt")
    with pytest.raises(EngineError, match="unknown TTS engine"):
        get_engine("festival9000")
    slow = Voice("slow", "flite", "slt", "female", "us", tempo=0.25)
    s = parse_script(
        {
            "id": "slow",
            "place": "p",
            "speech_type": "monologue",
            "max_duration": 3.0,
            "background": {"description": "d", "keywords": ["k"]},
            "speakers": [{"id": "A", "role": "r", "gender": "female", "voice": "slow"}],
            "turns": [{"speaker": "A", "text": "This sentence is slow."}],
        }
    )
    with pytest.raises(
        TurnTooLongError, match=r"scene slow: turns\[0\]: synthesised speech is .* longer than the 3 s scene"
    ):
        build_speech_layer(s, VoiceRegistry([slow]), 0, synth)


def test_kokoro_and_zonos_fail_clearly_without_weights():
    for name in ("kokoro", "zonos"):
        eng = get_engine(name)
        if eng.available():
            pytest.skip(f"{name} is installed here")
        with pytest.raises(EngineError, match=f"{name}: the {name} package is not installed"):
            eng.synthesize("hello", "af_heart" if name == "kokoro" else __file__)
