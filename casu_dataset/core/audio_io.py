"""Audio I/O on soundfile + soxr only: any rate and channel count in, mono float32 out.

torchaudio/torchcodec cannot load beside the CPU torch wheel, so nothing here imports them.
Every failure names the file: a corrupt or unreadable file, a zero-length clip or NaN/inf
samples raise AudioError rather than silently yielding zeros.
"""

from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from casu_dataset.core.errors import InputError

SAMPLE_RATE = 16000


class AudioError(InputError, ValueError):
    """An audio source that cannot be used; the message names the file."""


def check_audio(x: np.ndarray, name: str) -> np.ndarray:
    if x.size == 0:
        raise AudioError(f"{name}: zero-length audio")
    if not np.all(np.isfinite(x)):
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise AudioError(f"{name}: {bad} NaN or infinite samples")
    return x


def to_mono(x: np.ndarray) -> np.ndarray:
    if x.ndim == 2 and x.shape[1] == 1 and x.dtype.kind == "f":
        # The mean of one value is that value; a copy is ~10x faster than a reduction over it.
        return np.ascontiguousarray(x[:, 0])
    return x.mean(axis=1) if x.ndim == 2 else x


def resample(x: np.ndarray, sr_in: int, sr_out: int = SAMPLE_RATE) -> np.ndarray:
    if sr_in == sr_out:
        return x.astype(np.float32, copy=False)
    # soxr "HQ" is deterministic for a given soxr version: regeneration relies on that.
    return soxr.resample(x.astype(np.float32, copy=False), sr_in, sr_out, quality="HQ").astype(np.float32)


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a file as checked mono float32 at its own rate: (samples, rate)."""
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: audio file not found")
    _check_wav_length(path)
    try:
        data, file_sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError) as err:
        raise AudioError(f"{path}: unreadable or corrupt audio ({err})") from None
    return check_audio(to_mono(check_audio(data, str(path))), str(path)), int(file_sr)


def _check_wav_length(path: Path) -> None:
    """A WAV whose `data` chunk claims more bytes than the file holds is cut short or has a damaged
    header: libsndfile would quietly read what is there, so a clip the catalog says lasts 10 h
    would be 1 s. Streaming writers' placeholders (0, 0xFFFFFFFF) are left to libsndfile."""
    try:
        with open(path, "rb") as f:
            _check_wav_claim(f, path.stat().st_size, str(path))
    except OSError as err:
        raise AudioError(f"{path}: unreadable ({err.strerror or err})") from None


def _check_wav_claim(f, size: int, name: str) -> None:
    """`_check_wav_length` over an open binary file of `size` bytes (a file, or bytes in memory)."""
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return
    while True:
        chunk = f.read(8)
        if len(chunk) < 8:
            return
        cid, n = chunk[:4], struct.unpack("<I", chunk[4:])[0]
        if cid == b"data":
            held = size - f.tell()
            if n not in (0, 0xFFFFFFFF) and n > held:
                raise AudioError(
                    f"{name}: the WAV header claims {n:,} bytes of audio but the file holds "
                    f"{held:,}: cut short or a damaged header"
                )
            return
        f.seek(n + (n & 1), 1)  # chunks are padded to an even size


def load_audio(path: str | Path, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Read a file as mono float32 at `sr`."""
    x, file_sr = read_audio(path)
    return check_audio(resample(x, file_sr, sr), str(path))


def load_array(data: np.ndarray, file_sr: int, name: str, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Validate an in-memory array (any shape (n,) or (n, ch)) into mono float32 at `sr`."""
    data = np.asarray(data, dtype=np.float32)
    check_audio(data, name)
    return check_audio(resample(to_mono(data), int(file_sr), sr), name)


def decode_bytes(
    blob: bytes, name: str = "<bytes>", sr: int = SAMPLE_RATE, stop: int | None = None
) -> np.ndarray:
    """Decoded, checked mono float32 at `sr`. `stop`: only the first `stop` frames of the file
    (decoding stops there; a FLAC seek to a later start costs more than decoding up to it)."""
    _check_wav_claim(io.BytesIO(blob), len(blob), name)  # a WAV in the bytes: its header, as for a file
    try:
        data, file_sr = sf.read(io.BytesIO(blob), dtype="float32", always_2d=True, stop=stop)
    except (sf.LibsndfileError, RuntimeError, ValueError) as err:
        raise AudioError(f"{name}: undecodable audio bytes ({err})") from None
    return load_array(data, file_sr, name, sr)


def wav_header(num_samples: int, sr: int = SAMPLE_RATE) -> bytes:
    """The header of a mono float32 WAV (IEEE float, fmt + fact + data chunks) of num_samples.

    libsndfile adds a PEAK chunk with a wall-clock timestamp to float WAVs, so its files
    differ byte for byte between two runs; this header has no timestamp. soundfile reads it."""
    n_bytes = 4 * num_samples
    fmt = struct.pack("<HHIIHH", 3, 1, sr, sr * 4, 4, 32)
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"fact"
        + struct.pack("<I", 4)
        + struct.pack("<I", num_samples)
        + b"data"
        + struct.pack("<I", n_bytes)
    )
    return b"RIFF" + struct.pack("<I", len(body) + n_bytes) + body


def wav_bytes(x: np.ndarray, sr: int = SAMPLE_RATE) -> bytes:
    """Mono float32 WAV bytes (`wav_header` + the samples, little-endian)."""
    data = np.ascontiguousarray(x, dtype="<f4").reshape(-1)
    return wav_header(data.shape[0], sr) + data.tobytes()


def write_wav(path: str | Path, x: np.ndarray, sr: int = SAMPLE_RATE) -> None:
    """Float32 WAV: lossless, so regenerated mixtures compare bit for bit. The samples are written
    from the array's own buffer (no copy of a 30 s scene)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.ascontiguousarray(x, dtype="<f4").reshape(-1)
    with open(path, "wb") as f:
        f.write(wav_header(data.shape[0], sr))
        f.write(data.data)  # the array's own buffer: no copy


def encode_flac(x: np.ndarray, sr: int = SAMPLE_RATE) -> bytes:
    buf = io.BytesIO()
    # 24-bit FLAC keeps quiet beds far above quantisation noise; libsndfile writes no
    # timestamps, so the bytes are a pure function of the samples.
    sf.write(buf, np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0), sr, format="FLAC", subtype="PCM_24")
    return buf.getvalue()


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def array_sha256(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()
