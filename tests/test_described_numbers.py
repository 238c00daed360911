"""Numbers a reader trusts are checked against what they describe: `regenerate` refuses an
annotation whose stated times (onsets, durations, sample counts) disagree with the plan it renders
from, naming the field; a WAV held as bytes (a dataset row, a stem) whose header claims more audio
than the bytes hold is named, as a WAV file already is."""

import copy
import io
import json
import re
import struct

import numpy as np
import pytest
import soundfile as sf

from casu_dataset.contract import AnnotationError
from casu_dataset.core.audio_io import AudioError, decode_bytes
from casu_dataset.mix.regenerate import regenerate


@pytest.fixture(scope="module")
def annotation(casu_small):
    import pyarrow.parquet as pq

    rows = pq.read_table(str(casu_small / "scenes"), use_threads=False).to_pylist()
    return next(a for a in (json.loads(r["annotation"]) for r in rows) if a["events"] and a["turns"])


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda a: a["events"][0].update(onset=float("nan")), "events[0].onset"),
        (lambda a: a["turns"][0].update(onset=a["turns"][0]["onset"] + 3.0), "turns[0].onset"),
        (lambda a: a.update(num_samples=10**12), "num_samples"),
        (lambda a: a.update(duration=float("inf")), "duration"),
        (lambda a: a["plan"].update(duration=36000.0), "plan.duration"),
        (lambda a: a["events"][0].update(length_samples=10**12), "events[0].length_samples"),
        (lambda a: a["plan"]["turns"][0].update(offset=None), "plan.turns[0].offset"),
        (
            lambda a: a["events"][0].update(onset_samples=a["events"][0]["onset_samples"] + 1),
            "events[0].onset_samples",
        ),
    ],
)
def test_regenerate_refuses_stated_times_that_disagree_with_the_plan(annotation, edit, field):
    a = copy.deepcopy(annotation)
    edit(a)
    with pytest.raises(AnnotationError, match="<annotation>: " + re.escape(field)):
        regenerate(a)


def test_a_wav_in_bytes_claiming_more_than_it_holds_is_named():
    buf = io.BytesIO()
    sf.write(buf, np.zeros(16000, np.float32), 16000, format="WAV", subtype="PCM_16")
    good = buf.getvalue()
    assert decode_bytes(good, "row x audio").size == 16000
    at = good.index(b"data") + 4
    ten_hours = struct.pack("<I", 16000 * 2 * 36000)
    with pytest.raises(
        AudioError, match=r"row x audio: the WAV header claims 1,152,000,000 bytes .* holds 32,000"
    ):
        decode_bytes(good[:at] + ten_hours + good[at + 4 :], "row x audio")
