"""End-to-end checks of `waav transcribe` against faster-whisper 1.2.1 on the same audio.

Environment (set by tests/CMakeLists.txt):
  WAAV_BIN          the waav binary (a .py path is run with this Python: tests/e2e/fake_waav.py)
  WAAV_MODELS_DIR   holds whisper-tiny.en/ (CTranslate2 model.bin, config.json, tokenizer.json)
  WAAV_SHARED_DATA  holds speech/jfk.wav and speech/ljspeech/{*.wav,transcripts.txt}
  WAAV_CACHE_DIR    where faster-whisper's results are cached (optional; a temp dir otherwise)
Every test skips, saying why, when one of these is missing.

waav runs once on all clips (`--json`, one JSON object per line), once on two generated clips,
once on jfk.wav for plain text, once on jfk.wav for single-file --json, and once per malformed
input; faster-whisper's results come from tests/reference/faster_whisper_reference.py, cached on
disk.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reference"))
import audio16k  # noqa: E402
import faster_whisper_reference as fwr  # noqa: E402
import normalize  # noqa: E402

THREADS = 2
PROCESS_TIMEOUT_S = 600
TIMESTAMP_TOLERANCE_S = 0.01

JFK_SENTENCE = (
    "And so my fellow Americans, ask not what your country can do for you, "
    "ask what you can do for your country."
)

# Clips where waav's text is known to differ from faster-whisper's: file name -> reason.
# The comparison fails on any difference not listed here, and on a listed clip that now matches
# (so the table cannot go stale).
KNOWN_TEXT_DIFFERENCES: dict[str, str] = {}

# Corpus WER (normalize.py rules) of faster-whisper tiny.en greedy over jfk + the 32 LJ Speech
# clips, measured with tests/reference: 45 errors / 596 reference words = 7.55 % (mostly numbers
# written as digits, and proper names). waav may be at most about one point worse.
FASTER_WHISPER_WER_MEASURED = 45 / 596
WER_BOUND = 0.085


# ---------------------------------------------------------------------------------------------
# Environment and runs


class Env:
    def __init__(self):
        missing = []
        self.bin = os.environ.get("WAAV_BIN", "")
        if not self.bin or not Path(self.bin).is_file():
            missing.append(f"waav binary (WAAV_BIN={self.bin!r})")
        models = os.environ.get("WAAV_MODELS_DIR", "")
        self.model_dir = Path(models) / "whisper-tiny.en"
        if not (self.model_dir / "model.bin").is_file():
            missing.append(f"model {self.model_dir}/model.bin (run scripts/setup)")
        data = os.environ.get("WAAV_SHARED_DATA", "")
        self.speech = Path(data) / "speech"
        self.transcripts_path = self.speech / "ljspeech" / "transcripts.txt"
        if not (self.speech / "jfk.wav").is_file() or not self.transcripts_path.is_file():
            missing.append(f"shared speech data under {self.speech} (WAAV_SHARED_DATA)")
        self.missing = missing
        self.cache_dir = os.environ.get("WAAV_CACHE_DIR", "")

    def command(self, *args: str) -> list[str]:
        prefix = [sys.executable, self.bin] if self.bin.endswith(".py") else [self.bin]
        return prefix + ["transcribe", *args, "--threads", str(THREADS), "--model",
                         str(self.model_dir)]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), capture_output=True, text=True,
                              timeout=PROCESS_TIMEOUT_S)


@pytest.fixture(scope="session")
def env() -> Env:
    e = Env()
    if e.missing:
        pytest.skip("missing: " + "; ".join(e.missing))
    return e


@pytest.fixture(scope="session")
def lj_transcripts(env) -> dict[str, str]:
    out = {}
    for line in env.transcripts_path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            name, text = line.split("|", 1)
            out[name] = text
    return out


@pytest.fixture(scope="session")
def clips(env, lj_transcripts) -> list[Path]:
    """jfk.wav and the LJ Speech clips named in transcripts.txt, in that order."""
    paths = [env.speech / "jfk.wav"] + [env.speech / "ljspeech" / n for n in sorted(lj_transcripts)]
    absent = [str(p) for p in paths if not p.is_file()]
    assert not absent, f"clips named in transcripts.txt are missing: {absent}"
    return paths


@pytest.fixture(scope="session")
def waav_results(env, clips) -> dict[str, dict]:
    """waav's --json results for every clip from one process, by file name."""
    proc = env.run("--json", *map(str, clips))
    assert proc.returncode == 0, (
        f"waav exited {proc.returncode} on {len(clips)} clips\nstderr:\n{proc.stderr}"
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == len(clips), (
        f"expected one JSON object per file ({len(clips)}), got {len(lines)} lines:\n"
        + proc.stdout[:2000]
    )
    results = {}
    for path, line in zip(clips, lines):
        obj = json.loads(line)
        assert Path(obj["file"]).name == path.name, f"output out of order: {obj['file']} for {path}"
        results[path.name] = obj
    return results


@pytest.fixture(scope="session")
def reference_results(env, clips, tmp_path_factory) -> dict[str, dict]:
    """faster-whisper's results for every clip (cached under WAAV_CACHE_DIR), by file name."""
    cache = env.cache_dir or str(tmp_path_factory.mktemp("fw-cache"))
    results = fwr.transcribe_files([str(p) for p in clips], str(env.model_dir), cache)
    return {Path(p).name: r for p, r in results.items()}


def _write_wav(path: Path, samples: np.ndarray, rate_hz: int) -> None:
    """Writes [frames, channels] int16 (PCM) or float32 (IEEE float) samples as a WAV file."""
    tag, bits = (1, 16) if samples.dtype == np.int16 else (3, 32)
    channels = samples.shape[1]
    data = samples.astype("<i2" if tag == 1 else "<f4").tobytes()
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate_hz, rate_hz * block, block, bits)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", len(data)) + data)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def _read_mono(path: Path, rate_hz: int) -> np.ndarray:
    samples, file_rate_hz = audio16k.load_wav(str(path))
    assert samples.shape[1] == 1 and file_rate_hz == rate_hz, f"{path}: not mono {rate_hz} Hz"
    return samples[:, 0]


@pytest.fixture(scope="session")
def generated_clips(env, tmp_path_factory) -> list[Path]:
    """Two WAVs made from the shared clips, byte-identical on every run (so the cache hits):
    - long_ljspeech.wav: LJ001-0001..0006 back to back, 22.05 kHz PCM16, ~40 s: longer than one
      30 s Whisper window, so seeking and conditioning on the previous text are exercised;
    - jfk_stereo_f32.wav: jfk.wav as IEEE float32 stereo, right channel at half the left's
      amplitude (exact in float32), to exercise float decoding and the mixdown.
    """
    out = tmp_path_factory.mktemp("generated")
    lj = env.speech / "ljspeech"
    parts = [_read_mono(lj / f"LJ001-{i:04d}.wav", 22050) for i in range(1, 7)]
    long_path = out / "long_ljspeech.wav"
    # Back to the files' int16 exactly: they were read as int16 / 32768.
    pcm16 = np.round(np.concatenate(parts) * 32768).astype(np.int16)
    _write_wav(long_path, pcm16[:, None], 22050)
    left = _read_mono(env.speech / "jfk.wav", 16000)
    stereo_path = out / "jfk_stereo_f32.wav"
    _write_wav(stereo_path, np.stack([left, left * np.float32(0.5)], axis=1), 16000)
    return [long_path, stereo_path]


# ---------------------------------------------------------------------------------------------
# Transcripts


def test_jfk_matches_the_known_sentence(waav_results):
    # tiny.en greedy writes this sentence without its commas; the normaliser drops punctuation,
    # so the words must match exactly.
    got = waav_results["jfk.wav"]["text"]
    assert normalize.normalize(got) == normalize.normalize(JFK_SENTENCE), f"waav said: {got!r}"


def test_text_matches_faster_whisper(waav_results, reference_results, report):
    differing = {
        n for n in reference_results if waav_results[n]["text"] != reference_results[n]["text"]
    }
    report(f"text identical to faster-whisper on {len(reference_results) - len(differing)} of "
           f"{len(reference_results)} clips")
    problems = []
    for name in sorted(differing - KNOWN_TEXT_DIFFERENCES.keys()):
        problems.append(f"{name} differs:\n  waav:           {waav_results[name]['text']!r}\n"
                        f"  faster-whisper: {reference_results[name]['text']!r}")
    for name in sorted(KNOWN_TEXT_DIFFERENCES.keys() - differing):
        problems.append(f"{name} is in KNOWN_TEXT_DIFFERENCES ({KNOWN_TEXT_DIFFERENCES[name]}) "
                        "but now matches faster-whisper: remove it from the table")
    assert not problems, "\n".join(problems)


def _timestamp_problems(waav_results, reference_results, skip_differing_text: bool) -> list[str]:
    problems = []
    for name, ref in reference_results.items():
        got = waav_results[name]
        if got["text"] != ref["text"] and skip_differing_text:
            continue  # reported by test_text_matches_faster_whisper
        want = [(s["start"], s["end"], s["text"]) for s in ref["segments"]]
        have = [(s["start"], s["end"], s["text"]) for s in got["segments"]]
        close = len(want) == len(have) and all(
            abs(a[0] - b[0]) <= TIMESTAMP_TOLERANCE_S + 1e-9
            and abs(a[1] - b[1]) <= TIMESTAMP_TOLERANCE_S + 1e-9
            for a, b in zip(want, have)
        )
        if not close:
            fmt = lambda segs: "\n".join(f"    [{s:7.2f} {e:7.2f}] {t!r}" for s, e, t in segs)
            problems.append(f"{name}:\n  waav:\n{fmt(have)}\n  faster-whisper:\n{fmt(want)}")
    return problems


def test_segment_timestamps_match_faster_whisper(waav_results, reference_results):
    problems = _timestamp_problems(waav_results, reference_results, skip_differing_text=True)
    assert not problems, "segment timestamps differ (tolerance 0.01 s):\n" + "\n".join(problems)


def test_generated_clips_match_faster_whisper(env, generated_clips):
    """Text and segments on a clip longer than 30 s and on float32 stereo (no known differences)."""
    proc = env.run("--json", *map(str, generated_clips))
    assert proc.returncode == 0, f"waav exited {proc.returncode}\nstderr:\n{proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == len(generated_clips), proc.stdout[:2000]
    waav = {p.name: json.loads(line) for p, line in zip(generated_clips, lines)}
    cache = env.cache_dir or str(generated_clips[0].parent / "fw-cache")
    ref = fwr.transcribe_files([str(p) for p in generated_clips], str(env.model_dir), cache)
    ref = {Path(p).name: r for p, r in ref.items()}
    assert max(s["end"] for s in ref["long_ljspeech.wav"]["segments"]) > 30.0, "not > 30 s"
    problems = [
        f"{n} differs:\n  waav:           {waav[n]['text']!r}\n"
        f"  faster-whisper: {ref[n]['text']!r}"
        for n in ref
        if waav[n]["text"] != ref[n]["text"]
    ]
    problems += _timestamp_problems(waav, ref, skip_differing_text=False)
    assert not problems, "\n".join(problems)


def test_wer_against_ljspeech_transcripts(waav_results, reference_results, lj_transcripts, report):
    truth = {"jfk.wav": JFK_SENTENCE, **lj_transcripts}
    waav_wer, waav_err, n_words = normalize.wer(
        (truth[n], waav_results[n]["text"]) for n in truth)
    fw_wer, fw_err, _ = normalize.wer((truth[n], reference_results[n]["text"]) for n in truth)
    line = (f"WER over {len(truth)} clips, {n_words} words: waav {100 * waav_wer:.2f} % "
            f"({waav_err} errors), faster-whisper {100 * fw_wer:.2f} % ({fw_err} errors), "
            f"bound {100 * WER_BOUND:.2f} %")
    report(line)
    print(line)
    assert fw_wer <= WER_BOUND, (
        f"faster-whisper's own WER moved ({100 * fw_wer:.2f} %, was "
        f"{100 * FASTER_WHISPER_WER_MEASURED:.2f} %): the reference changed, re-derive WER_BOUND")
    assert waav_wer <= WER_BOUND, line


# ---------------------------------------------------------------------------------------------
# CLI behaviour


def test_plain_output_is_the_json_text(env, waav_results):
    proc = env.run(str(env.speech / "jfk.wav"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == waav_results["jfk.wav"]["text"]


def test_json_output_schema(env):
    proc = env.run("--json", str(env.speech / "jfk.wav"))
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert set(obj) >= {"file", "duration_s", "text", "segments"}, sorted(obj)
    assert Path(obj["file"]).name == "jfk.wav"
    assert abs(obj["duration_s"] - 11.0) < 0.01, obj["duration_s"]
    assert isinstance(obj["text"], str) and obj["text"] == obj["text"].strip() and obj["text"]
    assert obj["segments"], "no segments"
    previous_end = 0.0
    for seg in obj["segments"]:
        assert set(seg) >= {"start", "end", "text"}, sorted(seg)
        assert isinstance(seg["text"], str)
        assert previous_end - 1e-9 <= seg["start"] <= seg["end"], seg
        previous_end = seg["end"]
    assert "".join(s["text"] for s in obj["segments"]).strip() == obj["text"]


def _wav_with_format_tag(tag: int) -> bytes:
    """A well-formed RIFF/WAVE file whose fmt chunk names an encoding waav does not decode."""
    fmt = struct.pack("<HHIIHH", tag, 1, 16000, 2000, 1, 0)  # 0x0055 is MPEG layer 3
    data = bytes(1000)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", len(data)) + data)
    return b"RIFF" + struct.pack("<I", len(body)) + body


BAD_INPUTS = ["text_file.wav", "empty.wav", "truncated_header.wav", "mp3_in_wav.wav", "missing.wav"]


def _bad_input(case: str, jfk: Path) -> bytes | None:
    """The bytes of a malformed input file, or None for a file that does not exist."""
    return {
        "text_file.wav": lambda: b"This is a text file, not audio.\n" * 8,
        "empty.wav": lambda: b"",
        "truncated_header.wav": lambda: jfk.read_bytes()[:30],  # RIFF, WAVE, half a fmt chunk
        "mp3_in_wav.wav": lambda: _wav_with_format_tag(0x0055),
        "missing.wav": lambda: None,
    }[case]()


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_fails_with_one_line_naming_the_file(env, tmp_path, case):
    content = _bad_input(case, env.speech / "jfk.wav")
    path = tmp_path / case
    if content is not None:
        path.write_bytes(content)
    proc = env.run(str(path))
    assert proc.returncode > 0, (
        f"exit status {proc.returncode} (negative: killed by a signal)\nstderr:\n{proc.stderr}")
    message = proc.stderr.strip()
    assert message, "nothing on stderr"
    assert "\n" not in message, f"stderr has more than one line:\n{proc.stderr}"
    assert path.name in message, f"stderr does not name the file: {message!r}"
