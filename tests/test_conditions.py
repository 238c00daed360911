"""The eight layer conditions, built from a real dataset's stems."""

import json

import numpy as np
import pytest

from casu_dataset.contract import SceneAnnotation
from casu_dataset.core.audio_io import decode_bytes
from casu_dataset.core.loudness import measure_lufs
from harness.run.conditions import ALL, FULL, active_spans, parse_conditions, render


@pytest.fixture(scope="module")
def scene(casu_small):
    import pyarrow.parquet as pq

    rows = pq.read_table(casu_small / "scenes").to_pylist()
    row = next(r for r in rows if json.loads(r["annotation"])["plan"]["events"])
    stems = {k: decode_bytes(row[k]["bytes"]) for k in ("background", "speech", "events")}
    return stems, json.loads(row["annotation"]), decode_bytes(row["audio"]["bytes"])


def test_the_full_condition_is_the_mixture(scene):
    stems, ann, mix = scene
    assert np.abs(render(FULL, stems, ann) - mix).max() < 2e-4  # 16-bit FLAC rounding of four files


@pytest.mark.parametrize("cond", ALL, ids=lambda c: c.name)
def test_masked_layers_are_noise_of_the_same_loudness_on_their_active_span(scene, cond):
    """A contrast-family variant (the fixture is v2) is masked on its reserved slots, at the layer's
    recorded target loudness shared by the family, so the masked variants of a family sound alike."""
    stems, ann, _ = scene
    typed = SceneAnnotation.parse(ann)
    assert typed.family_key  # a family variant: the reserved-slot rule below is the one under test
    sr = ann["sample_rate"]
    out = render(cond, stems, ann, seed=5)
    kept = sum(stems[k] for k in cond.keep) if cond.keep else np.zeros_like(out)
    residual = out - kept  # exactly the masked layers' noise
    assert np.array_equal(out, render(cond, stems, ann, seed=5))  # seeded
    for layer in {"speech", "events", "background"} - cond.keep:
        spans = active_spans(ann, layer, reserved=True)
        noise = render(
            type(cond)(frozenset({"speech", "events", "background"} - {layer})), stems, ann, seed=5
        ) - sum(stems[k] for k in ("speech", "events", "background") if k != layer)
        inside = np.concatenate([noise[a:b] for a, b in spans])
        target = typed.expected_lufs(layer)
        assert target is not None and abs(measure_lufs(inside, sr) - target) < 0.5
        mask = np.zeros(len(noise), bool)
        for a, b in spans:
            mask[a:b] = True
        assert not noise[~mask].any()  # silent outside the layer's reserved slots
        assert abs(np.mean(inside)) < 0.01 and 0.3 < np.std(inside) / (np.std(stems[layer][mask]) + 1e-9) < 3
    if cond.is_full:
        assert not residual.any()


def test_condition_names():
    assert [c.name for c in parse_conditions("all")] == [
        "___",
        "__B",
        "_E_",
        "_EB",
        "P__",
        "P_B",
        "PE_",
        "PEB",
    ]
    assert parse_conditions(None) == [FULL] and parse_conditions("full,PEB") == [FULL]
    with pytest.raises(ValueError, match="--conditions 'XYZ'"):
        parse_conditions("XYZ")
