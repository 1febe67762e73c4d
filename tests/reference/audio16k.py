"""Loads a WAV file and turns it into the 16 kHz mono float32 samples Whisper consumes.

This is the reference for what `waav transcribe` does to a file before the model sees it, so that
faster-whisper (tests/reference/faster_whisper_reference.py) and waav are fed the same samples:

  1. Read the RIFF/WAVE container. Encodings: PCM 16-bit and 32-bit integer, IEEE float 32-bit
     (format tags 1 and 3, and WAVE_FORMAT_EXTENSIBLE carrying either). Anything else is an error.
  2. Convert to float32 in [-1, 1): int16 / 32768, int32 / 2147483648, float32 as is.
  3. Mix channels down to mono by their mean (computed in float32).
  4. Resample to 16 kHz with libsoxr (the `soxr` PyPI package, which bundles libsoxr 0.1.3, the
     same version as Debian's libsoxr0) at quality "HQ" (SOXR_HQ), float32 in and out. A file
     already at 16 kHz is passed through untouched (no resampler). soxr.resample() gives output
     bit-identical to soxr_oneshot() for these inputs (checked on the LJ Speech clips).

The container is read by the small RIFF walker below rather than the standard library's `wave`
module, because Python 3.11's `wave` rejects IEEE float and WAVE_FORMAT_EXTENSIBLE files. A data
chunk that claims more bytes than the file holds is read up to the end of the file (writers that
stream set the size to 0xFFFFFFFF); a trailing partial frame is dropped.

Usage as a script (prints a summary, or writes the samples as raw float32 with --raw OUT):
  python audio16k.py FILE.wav [--raw OUT.f32]
"""

from __future__ import annotations

import argparse
import struct
import sys

import numpy as np
import soxr

TARGET_RATE_HZ = 16000
SOXR_QUALITY = "HQ"

_FORMAT_PCM = 0x0001
_FORMAT_IEEE_FLOAT = 0x0003
_FORMAT_EXTENSIBLE = 0xFFFE


class WavError(ValueError):
    """A WAV file that cannot be read; the message names the file and what is wrong."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


def _read_chunks(path: str, data: bytes) -> tuple[bytes, bytes]:
    """Returns the fmt chunk body and data chunk body of a RIFF/WAVE file."""
    if len(data) < 12:
        raise WavError(path, f"too short for a WAV header ({len(data)} bytes)")
    if data[0:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError(path, "not a RIFF/WAVE file")
    pos = 12
    fmt = None
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = data[pos + 8 : pos + 8 + size]
        if chunk_id == b"fmt ":
            if len(body) < 16:
                raise WavError(path, f"truncated fmt chunk ({len(body)} of 16 bytes)")
            fmt = body
        elif chunk_id == b"data":
            if fmt is None:
                raise WavError(path, "data chunk before fmt chunk")
            return fmt, body
        pos += 8 + size + (size & 1)  # chunks are padded to an even size
    if fmt is None:
        raise WavError(path, "truncated header: no fmt chunk")
    raise WavError(path, "truncated: no data chunk")


def _format_tag(path: str, fmt: bytes) -> int:
    (tag,) = struct.unpack_from("<H", fmt, 0)
    if tag == _FORMAT_EXTENSIBLE:
        if len(fmt) < 40:
            raise WavError(path, "truncated WAVE_FORMAT_EXTENSIBLE fmt chunk")
        # The sub-format GUID starts with the real format tag.
        (tag,) = struct.unpack_from("<H", fmt, 24)
    return tag


def load_wav(path: str) -> tuple[np.ndarray, int]:
    """Returns (samples float32 of shape [frames, channels], sample_rate_hz). Raises WavError."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise WavError(path, e.strerror or str(e)) from e
    fmt, body = _read_chunks(path, raw)
    tag = _format_tag(path, fmt)
    channels, rate_hz = struct.unpack_from("<HI", fmt, 2)
    (bits,) = struct.unpack_from("<H", fmt, 14)
    if channels == 0 or rate_hz == 0:
        raise WavError(path, f"invalid fmt chunk ({channels} channels, {rate_hz} Hz)")
    usable = len(body) - len(body) % (channels * bits // 8 or 1)
    if tag == _FORMAT_PCM and bits in (16, 32):
        dtype, scale = ("<i2", 32768.0) if bits == 16 else ("<i4", 2147483648.0)
        # Exact: the scale is a power of two.
        samples = np.frombuffer(body[:usable], dtype).astype(np.float32) / np.float32(scale)
    elif tag == _FORMAT_IEEE_FLOAT and bits == 32:
        samples = np.frombuffer(body[:usable], "<f4").astype(np.float32)
    else:
        raise WavError(
            path, f"unsupported encoding (format tag 0x{tag:04x}, {bits} bits per sample)"
        )
    return samples.reshape(-1, channels), rate_hz


def to_16k_mono(samples: np.ndarray, rate_hz: int) -> np.ndarray:
    """Mixes [frames, channels] float32 down to mono and resamples it to 16 kHz (float32)."""
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if rate_hz == TARGET_RATE_HZ:
        return mono
    return soxr.resample(mono, rate_hz, TARGET_RATE_HZ, quality=SOXR_QUALITY).astype(np.float32)


def load_16k(path: str) -> np.ndarray:
    """The whole pipeline: WAV file -> 16 kHz mono float32."""
    samples, rate_hz = load_wav(path)
    return to_16k_mono(samples, rate_hz)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wav")
    parser.add_argument("--raw", help="write the 16 kHz samples as raw little-endian float32")
    args = parser.parse_args(argv)
    try:
        audio = load_16k(args.wav)
    except WavError as e:
        print(e, file=sys.stderr)
        return 1
    if args.raw:
        audio.astype("<f4").tofile(args.raw)
    print(f"{args.wav}: {audio.size} samples at 16 kHz ({audio.size / TARGET_RATE_HZ:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
