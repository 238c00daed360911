"""Mix-level intelligibility on real scenes: real flite speech, real bank clips, real Whisper."""

import json

import pytest

from casu_dataset.mix.mixer import (
    ClipCache,
    MixConfig,
    SceneSources,
    SourceRef,
    compose,
)
from casu_dataset.script.schema import parse_script
from casu_dataset.speech.intelligibility import WhisperChecker
from casu_dataset.speech.mix_check import (
    DEFAULT_MIN_RATIO_DB,
    MixIntelligibilityError,
    TranscriptCache,
    check_mix,
    overlaps,
)

TURNS = [
    {"speaker": "T", "text": "It's time to go, everyone. Please line up by the door."},
    {"speaker": "S", "text": "Okay, we are coming right now."},
]  # what conftest's speech_wavs say


def scene(anchor: dict, sid: str):
    return parse_script(
        {
            "id": sid,
            "place": "home",
            "speech_type": "conversation",
            "background": {"description": "a fan hums", "keywords": ["fan"]},
            "speakers": [
                {"id": "T", "role": "teacher", "gender": "female"},
                {"id": "S", "role": "student", "gender": "male"},
            ],
            "turns": TURNS,
            "events": [
                {
                    "id": "jackhammer",
                    "description": "a jackhammer",
                    "keywords": ["jackhammer"],
                    "anchor": anchor,
                }
            ],
        }
    )


class CountingChecker(WhisperChecker):
    """The real checker, counting how often Whisper actually runs."""

    calls = 0

    def transcribe(self, audio):
        type(self).calls += 1
        return super().transcribe(audio)


@pytest.fixture(scope="module")
def checker():
    return CountingChecker(cpu_threads=2)


def mix(clips_dir, speech_wavs, anchor, sid, event_snr):
    sources = SceneSources(
        SourceRef(str(clips_dir / "ba__indoor_hum_appliance__FanLoop.ogg"), "fan"),
        [SourceRef(str(p), p.stem) for p in speech_wavs],
        [SourceRef(str(clips_dir / "ev__jackhammer__33_Jackhammer.ogg"), "jackhammer")],
    )
    cfg = MixConfig(speech_snr_db=(12.0, 12.0), event_snr_db=(event_snr, event_snr))
    return compose(scene(anchor, sid), sources, seed=1, cfg=cfg, cache=ClipCache())


def test_loud_event_during_a_turn_fails_the_scene_with_the_reason(clips_dir, speech_wavs, checker, tmp_path):
    res = mix(clips_dir, speech_wavs, {"type": "during_turn", "turn": 0, "offset": 0.3}, "jack_during", 24.0)
    assert overlaps(res.annotation) == [["jackhammer"], []]
    with pytest.raises(MixIntelligibilityError) as err:
        check_mix(res, checker, max_wer=0.5, cache=TranscriptCache(tmp_path))
    msg = str(err.value)
    assert msg.startswith("scene jack_during: ") and "turn 0: speech-to-rest" in msg
    assert f"< {DEFAULT_MIN_RATIO_DB:g} dB" in msg and "overlapped by jackhammer" in msg
    assert "mixture WER" in msg and "turn 1" not in msg  # the untouched turn is not blamed


def test_clean_scene_passes_and_is_recorded(clips_dir, speech_wavs, checker, tmp_path):
    # The same jackhammer, as loud, after the conversation: nothing sounds over the speech.
    res = mix(clips_dir, speech_wavs, {"type": "after_turn", "turn": 1, "offset": 0.3}, "jack_after", 24.0)
    before = CountingChecker.calls
    rec = check_mix(res, checker, max_wer=0.5, cache=TranscriptCache(tmp_path))
    assert CountingChecker.calls == before  # no overlap, high ratio: Whisper is not run
    assert [t["checked"] for t in rec["turns"]] == [False, False]
    assert all(t["wer"] is None and t["ratio_db"] > 8.0 for t in rec["turns"])
    assert rec["max_wer"] == 0.5 and rec["min_ratio_db"] == DEFAULT_MIN_RATIO_DB
    json.dumps(rec, allow_nan=False)  # fits a JSON annotation


def test_overlapped_turn_is_transcribed_once_and_cached_on_disk(clips_dir, speech_wavs, checker, tmp_path):
    # A quiet jackhammer during turn 0: overlapped, so transcribed, but intelligible.
    res = mix(clips_dir, speech_wavs, {"type": "during_turn", "turn": 0, "offset": 0.3}, "jack_quiet", 0.0)
    before = CountingChecker.calls
    rec = check_mix(res, checker, max_wer=0.5, cache=TranscriptCache(tmp_path))
    t0, t1 = rec["turns"]
    assert t0["checked"] and t0["overlapped_by"] == ["jackhammer"] and t0["ratio_db"] >= DEFAULT_MIN_RATIO_DB
    assert t0["wer"] is not None and t0["wer"] <= 0.5 and not t1["checked"]
    assert CountingChecker.calls == before + 1
    # A new process's cache on the same folder: the same segment is never transcribed again.
    again = check_mix(res, checker, max_wer=0.5, cache=TranscriptCache(tmp_path))
    assert again == rec and CountingChecker.calls == before + 1


def test_without_checker_ratios_are_recorded_and_still_enforced(clips_dir, speech_wavs):
    ok = mix(clips_dir, speech_wavs, {"type": "during_turn", "turn": 0, "offset": 0.3}, "jack_quiet", 0.0)
    rec = check_mix(ok, None)
    assert [t["checked"] for t in rec["turns"]] == [False, False] and all(
        t["wer"] is None for t in rec["turns"]
    )
    bad = mix(clips_dir, speech_wavs, {"type": "during_turn", "turn": 0, "offset": 0.3}, "jack_during", 24.0)
    with pytest.raises(
        MixIntelligibilityError, match="turn 0: speech-to-rest -?[0-9.]+ dB < 3 dB; overlapped by"
    ):
        check_mix(bad, None)


def test_ratio_catches_what_whisper_misses(clips_dir, speech_wavs, checker, tmp_path):
    # An event leaves speech ~1 dB above the rest while Whisper still gets
    # most words (WER <= max_wer), so only the ratio flags the scene.
    res = mix(clips_dir, speech_wavs, {"type": "during_turn", "turn": 0, "offset": 0.3}, "jack_mid", 12.0)
    with pytest.raises(MixIntelligibilityError) as err:
        check_mix(res, checker, max_wer=0.5, cache=TranscriptCache(tmp_path))
    msg = str(err.value)
    ratio = float(msg.split("speech-to-rest ")[1].split(" dB")[0])
    assert -3.0 < ratio < DEFAULT_MIN_RATIO_DB and "turn 0" in msg


def test_exact_sum_is_fsum_bit_for_bit():
    """The mix check's and the loudness gate's sums: exact_sum gives math.fsum's value (the
    correctly rounded sum) on squares of K-weighted audio, wide dynamic ranges, subnormals,
    cancellation, signed zeros, and falls back where fsum overflows."""
    import math

    import numpy as np

    from casu_dataset.core.loudness import exact_sum, kweight

    rng = np.random.default_rng(7)
    cases = [np.square(kweight(rng.uniform(-0.5, 0.5, 32000), 16000), dtype=np.float64)]
    for k in (1, 2, 17, 1000, 50000):
        cases += [
            np.square(rng.standard_normal(k).astype(np.float32), dtype=np.float64),
            rng.standard_normal(k) * 10.0 ** rng.integers(-300, 300, k),
            rng.standard_normal(k) * 1e-310,  # subnormals
        ]
        b = rng.standard_normal(k)
        cases.append(np.concatenate([b, -b, [1e-20]]))  # all but a tiny term cancels
    cases += [
        np.array(v, dtype=np.float64)
        for v in (
            [0.0],
            [-0.0],
            [-0.0, -0.0],
            [0.1] * 10,
            [1e16, 1.0, -1e16],
            [2.0**-1074] * 7,
            [1.0, 2.0**-53],
            [1.0, 2.0**-53, 2.0**-105],
        )
    ]
    for a in cases:
        got, want = exact_sum(a), math.fsum(a)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), (a[:4], got, want)
    big = np.array([1.7976931348623157e308, 1e292])
    with pytest.raises(OverflowError):
        math.fsum(big)
    with pytest.raises(OverflowError):
        exact_sum(big)
