"""The mixer on real bank recordings and real flite speech."""

import json
import re

import numpy as np
import pytest
import soundfile as sf

from casu_dataset.core.audio_io import AudioError, load_audio
from casu_dataset.core.loudness import gated_lufs, kweight, measure_lufs
from casu_dataset.mix.mixer import (
    ClipCache,
    MixConfig,
    SceneSources,
    SourceRef,
    compose,
)
from casu_dataset.mix.regenerate import regenerate
from casu_dataset.script.schema import parse_script
from casu_dataset.script.timeline import TimelineError

SR = 16000


def script(events=None, turns=None):
    return parse_script(
        {
            "id": "dismissal",
            "place": "school",
            "speech_type": "conversation",
            "background": {"description": "children in a playground", "keywords": ["school", "children"]},
            "speakers": [
                {"id": "T", "role": "teacher", "gender": "female"},
                {"id": "S", "role": "student", "gender": "male", "age": "child"},
            ],
            "turns": turns
            or [
                {"speaker": "T", "text": "It's time to go, everyone. Please line up by the door."},
                {"speaker": "S", "text": "Okay, we are coming right now."},
            ],
            "events": events
            if events is not None
            else [
                {
                    "id": "bell",
                    "description": "a school bell rings",
                    "keywords": ["bell"],
                    "anchor": {"type": "after_turn", "turn": 0, "offset": 0.2},
                },
                {
                    "id": "door",
                    "description": "a door closes",
                    "keywords": ["door"],
                    "anchor": {"type": "during_turn", "turn": 1, "offset": 0.3},
                },
            ],
        }
    )


@pytest.fixture
def sources(clips_dir, speech_wavs):
    return SceneSources(
        SourceRef(str(clips_dir / "ba__school_playground__School1.ogg"), "ba__school_playground__School1"),
        [SourceRef(str(p), p.stem) for p in speech_wavs],
        [
            SourceRef(str(clips_dir / "ev__electric_bell_ring__savebell2.ogg"), "bell"),
            SourceRef(str(clips_dir / "ev__door_open_close_slam__DoorClose2.ogg"), "door"),
        ],
    )


def test_outputs_shape_rate_and_sum(sources):
    r = compose(script(), sources, seed=3)
    n = r.annotation["num_samples"]
    assert r.mixture.dtype == np.float32 and r.mixture.shape == (n,)
    assert set(r.stems) == {"background", "speech", "events"}
    assert all(s.shape == (n,) and s.dtype == np.float32 for s in r.stems.values())
    np.testing.assert_allclose(r.mixture, sum(r.stems.values()), atol=1e-6)
    assert r.annotation["sample_rate"] == SR and r.annotation["duration"] <= 30.0


def test_timing_resolution_follows_anchors(sources):
    r = compose(script(), sources, seed=5)
    a = r.annotation
    t0, t1 = a["turns"]
    bell, door = a["events"]
    # bell: after turn 0 + 0.2 s; speech holds until the bell ends.
    assert bell["onset"] == pytest.approx(t0["offset"] + 0.2, abs=1e-9)
    assert t1["onset"] >= bell["offset"]
    # door: during turn 1, 0.3 s after its onset.
    assert door["onset"] == pytest.approx(t1["onset"] + 0.3, abs=1e-9)
    # annotation durations are the real clip durations
    assert t0["offset"] - t0["onset"] == pytest.approx(load_audio(sources.turns[0].path).shape[0] / SR)
    # the speech stem is silent outside the turns
    sp = r.stems["speech"]
    assert not sp[: int(t0["onset"] * SR) - 1].any()
    assert sp[int(t0["onset"] * SR) : int(t0["offset"] * SR)].any()


def test_at_time_and_start_anchors(sources):
    ev = [
        {
            "id": "bell",
            "description": "bell",
            "keywords": ["bell"],
            "anchor": {"type": "start", "offset": 0.1},
        },
        {"id": "door", "description": "door", "keywords": ["door"], "anchor": {"type": "at", "time": 6.0}},
    ]
    a = compose(script(events=ev), sources, seed=1).annotation
    assert a["events"][0]["onset"] == pytest.approx(0.1)
    assert a["turns"][0]["onset"] >= a["events"][0]["offset"]  # the scene opens with the bell
    assert a["events"][1]["onset"] == pytest.approx(6.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layer_loudness_within_half_LU_measured_by_pyloudnorm(sources, seed):
    cfg = MixConfig(fixed_duration=20.0)  # forces the 4 s bed to loop with crossfades
    r = compose(script(), sources, seed=seed, cfg=cfg)
    assert r.annotation["background"]["looped"]
    for layer in ("background", "speech", "events"):
        expected = r.annotation["loudness"][layer]["expected_lufs"]
        measured = measure_lufs(r.stems[layer].astype(np.float64), SR)
        assert abs(measured - expected) < 0.5, (layer, measured, expected)
    snr = r.annotation["plan"]["speech_snr_db"]
    assert 10.0 <= snr <= 16.0
    assert r.annotation["loudness"]["speech"]["target_lufs"] == pytest.approx(-35.0 + snr)


def test_fast_gating_matches_pyloudnorm(clips_dir):
    x = load_audio(clips_dir / "ba__rain__StereoRain.ogg")[: 20 * SR]
    x[3 * SR : 6 * SR] = 0  # silence exercises both gates
    assert gated_lufs(kweight(x, SR), SR) == pytest.approx(measure_lufs(x, SR), abs=1e-3)


def test_gating_over_a_layers_support_gives_the_same_bits(clips_dir):
    """A sparse layer's loudness summed over its clips' spans only is the sum over every sample,
    to the last bit (adding 0.0 leaves a float64 sum unchanged)."""
    from casu_dataset.core.loudness import merged_spans

    clip = kweight(load_audio(clips_dir / "ba__rain__StereoRain.ogg")[: 3 * SR], SR)
    n = 30 * SR
    for spans in ([(5, 8)], [(0, 3), (2, 4.5), (20, 23)], [(27.5, 30.5)], [(12, 15), (0, 1)]):
        x, placed = np.zeros(n, dtype=np.float32), []
        for a, b in spans:
            s, e = int(a * SR), min(n, int(b * SR))
            x[s:e] += clip[: e - s]
            placed.append((s, e))
        support = merged_spans(placed)
        assert all(s1 < e1 <= s2 for (s1, e1), (s2, _) in zip(support, support[1:]))
        assert gated_lufs(x, SR, support) == gated_lufs(x, SR)  # exact equality, not approx
    with pytest.raises(ValueError, match="overlap or are unsorted"):
        gated_lufs(x, SR, [(10, 20), (5, 30)])


def test_never_clips_and_records_gain(sources):
    cfg = MixConfig(background_lufs=-8.0, speech_snr_db=(6.0, 6.0), event_snr_db=(6.0, 6.0))
    r = compose(script(), sources, seed=0, cfg=cfg)
    assert np.max(np.abs(r.mixture)) <= cfg.peak_limit + 1e-6
    assert r.annotation["gains"]["clip_gain"] < 1.0
    assert r.annotation["clip_gain_db"] < 0.0
    np.testing.assert_allclose(r.mixture, sum(r.stems.values()), atol=1e-6)


def test_long_bed_cut_at_seeded_offset(clips_dir, speech_wavs, sources):
    long_bed = SourceRef(str(clips_dir / "ba__rain__StereoRain.ogg"), "rain")
    src = SceneSources(long_bed, sources.turns, sources.events)
    offs = {compose(script(), src, seed=s).annotation["background"]["offset_samples"] for s in range(4)}
    assert len(offs) > 1
    assert compose(script(), src, seed=2).annotation["background"]["looped"] is False


def test_deterministic_and_regenerates_bit_for_bit(sources, tmp_path):
    a = compose(script(), sources, seed=11)
    b = compose(script(), sources, seed=11, cache=ClipCache())
    assert a.mixture.tobytes() == b.mixture.tobytes()
    c = compose(script(), sources, seed=12)
    assert a.mixture.tobytes() != c.mixture.tobytes()
    out = a.write(tmp_path / "scene")
    g = regenerate(out / "annotation.json")
    assert g.mixture.tobytes() == a.mixture.tobytes()
    for k in a.stems:
        assert g.stems[k].tobytes() == a.stems[k].tobytes()
    # and the WAV on disk holds the same float32 samples
    wav, sr = sf.read(out / "mixture.wav", dtype="float32")
    assert sr == SR and wav.tobytes() == a.mixture.tobytes()


def test_regenerate_detects_changed_source(sources, tmp_path, speech_wavs):
    a = compose(script(), sources, seed=1)
    ann = json.loads(json.dumps(a.annotation))
    changed = tmp_path / "changed.wav"
    x, sr = sf.read(speech_wavs[0])
    sf.write(changed, x * 0.5, sr)
    ann["turns"][0]["path"] = str(changed)
    with pytest.raises(AudioError, match="changed.wav: content differs"):
        regenerate(ann)


def test_regenerate_refuses_numbers_it_cannot_render_naming_the_field(sources):
    from casu_dataset.contract import AnnotationError

    a = compose(script(), sources, seed=1)
    edits = [
        (lambda d: d.update(sample_rate=0), "sample_rate: 0"),
        (lambda d: d["mix_config"].update(sample_rate=0), "sample_rate: 16000 (mix_config 0)"),
        (
            lambda d: d["plan"].update(num_samples=10**12),
            "plan.num_samples: 1000000000000 is not a whole number",
        ),
        (
            lambda d: d["plan"]["turns"][0].update(onset_samples=float("nan")),
            "plan.turns[0].onset_samples: nan",
        ),
        (lambda d: d["plan"]["events"][0].update(onset_samples=-5), "plan.events[0].onset_samples: -5"),
        (
            lambda d: d["gains"]["speech"]["sources"].__setitem__(0, float("inf")),
            "gains.speech.sources[0]: inf",
        ),
        (lambda d: d["gains"].update(clip_gain=0.0), "gains.clip_gain: 0.0 is not a finite positive number"),
        (lambda d: d["plan"]["turns"].pop(), "plan.turns: expected one entry per turn"),
    ]
    for edit, want in edits:
        ann = json.loads(json.dumps(a.annotation))
        edit(ann)
        with pytest.raises(AnnotationError, match=re.escape(want)):
            regenerate(ann)
    assert regenerate(json.loads(json.dumps(a.annotation))).mixture.tobytes() == a.mixture.tobytes()


def test_any_rate_and_channels_in(tmp_path, clips_dir, sources):
    x = load_audio(clips_dir / "ev__dog_bark__dog3.ogg", sr=44100)
    stereo = tmp_path / "dog_stereo_44k.wav"
    sf.write(stereo, np.stack([x, 0.5 * x], axis=1), 44100)
    y = load_audio(stereo)
    assert y.ndim == 1 and y.dtype == np.float32
    assert y.shape[0] == pytest.approx(x.shape[0] * SR / 44100, abs=2)


@pytest.mark.parametrize("kind", ["corrupt", "empty", "nan", "missing"])
def test_bad_audio_is_named(tmp_path, sources, kind):
    p = tmp_path / f"{kind}.wav"
    if kind == "corrupt":
        p.write_bytes(b"RIFF\x00\x00\x00\x00WAVEgarbage" * 10)
    elif kind == "empty":
        sf.write(p, np.zeros(0, dtype=np.float32), SR)
    elif kind == "nan":
        x = np.zeros(SR, dtype=np.float32)
        x[100] = np.nan
        sf.write(p, x, SR, subtype="FLOAT")
    src = SceneSources(sources.background, [SourceRef(str(p), "bad"), sources.turns[1]], sources.events)
    with pytest.raises(AudioError, match=f"{kind}.wav"):
        compose(script(), src, seed=0)


def test_timeline_overrun_is_an_error(sources, speech_wavs):
    turns = [{"speaker": "T", "text": "It's time to go."}, {"speaker": "S", "text": "Okay."}]
    long_turn = SourceRef(str(speech_wavs[0]), "t")
    cfg = MixConfig(fixed_duration=3.0)
    with pytest.raises(TimelineError, match="scene dismissal: the timeline needs"):
        compose(
            script(turns=turns),
            SceneSources(sources.background, [long_turn, long_turn], sources.events),
            seed=0,
            cfg=cfg,
        )


def test_anti_clipping_gain_holds_every_stem_under_the_limit(sources):
    """Where layers cancel, a stem peaks above the mixture: the gain follows the stem, so no
    published stem exceeds the limit (realization 2 keeps the speech stem and needs that)."""
    from casu_dataset.core.loudness import peak_abs
    from casu_dataset.mix.mixer import top_peak

    r = compose(script(), sources, seed=0)
    speech = r.stems["speech"] * np.float32(2.0 / peak_abs(r.stems["speech"]))  # real speech, peak 2.0
    stems = {"speech": speech, "background": -0.75 * speech, "events": np.zeros_like(speech)}
    mixture = stems["speech"] + stems["background"]  # the bed cancels most of the speech
    assert peak_abs(mixture) == pytest.approx(0.5, rel=1e-6)
    assert top_peak(mixture, stems) == pytest.approx(2.0, rel=1e-6)
    # And in a real composition every stem is under the limit after the gain.
    cfg = MixConfig(background_lufs=-8.0, speech_snr_db=(6.0, 6.0), event_snr_db=(6.0, 6.0))
    loud = compose(script(), sources, seed=0, cfg=cfg)
    for name, v in loud.stems.items():
        assert peak_abs(v) <= cfg.peak_limit + 1e-6, name


def test_a_wav_whose_header_claims_more_than_the_file_holds_is_named(tmp_path):
    import struct

    from casu_dataset.core.audio_io import wav_bytes

    b = bytearray(wav_bytes(np.full(SR, 0.1, dtype=np.float32), SR))
    i = b.index(b"data")
    b[i + 4 : i + 8] = struct.pack("<I", SR * 4 * 3600 * 10)  # 10 h claimed over 1 s of samples
    bad = tmp_path / "ten_hours.wav"
    bad.write_bytes(bytes(b))
    with pytest.raises(AudioError, match=r"ten_hours.wav: the WAV header claims 2,304,000,000 bytes"):
        load_audio(bad)
    with pytest.raises(AudioError, match="ten_hours.wav"):
        ClipCache(SR).get(str(bad))
