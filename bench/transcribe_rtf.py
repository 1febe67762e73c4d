"""CPU file transcription: `waav transcribe` against faster-whisper on the same audio.

What is timed (wall clock, time.perf_counter), on jfk.wav + the 32 LJ Speech clips (~3.3 min):
  waav, one process        `waav transcribe --threads 2 --model M FILE...`: one process for all
                           files; includes process start, model load, WAV reading, resampling.
  waav, process per file   the same command once per file, run one after another; the sum.
  faster-whisper           WhisperModel(M, device="cpu", compute_type="float32", cpu_threads=2),
                           loaded once before timing (its load time is reported apart); per file:
                           tests/reference/audio16k.py (WAV -> 16 kHz, libsoxr HQ) + transcribe()
                           with beam_size=1, temperature=0.0, vad_filter=False, language="en",
                           other options default, segments consumed. In this Python process.
Each repetition runs every system once, in an order rotated per repetition so that neither
always runs first; one untimed warm-up round comes first (page cache, CPU clocks; waav's warm-up
uses --json, and its texts are compared with faster-whisper's as a sanity check). Reported per
system: median, min and max over the repetitions, real-time factor (median time / audio
duration: below 1 is faster than real time), and the ratio to faster-whisper's median.

  python bench/transcribe_rtf.py [--waav BIN | --waav-cmd "CMD ..."] [--reps 5] [--threads 2]
                                 [--model DIR] [--data DIR] [--single FILE] [--json-out FILE]

--waav-cmd replaces the waav binary by any command taking the same arguments, e.g.
  --waav-cmd "python tests/e2e/fake_waav.py" (faster-whisper posing as waav) to try the script.
Run it on an otherwise idle machine (--cpus pins both systems to the same CPUs); the load average
at the start is printed with the results: on a busy machine the spread (min/max) shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "reference"))
import audio16k  # noqa: E402
import faster_whisper_reference as fwr  # noqa: E402


def default_waav() -> str:
    for preset in ("release", "ci"):
        candidate = REPO / "build" / preset / "tools" / "waav" / "waav"
        if candidate.is_file():
            return str(candidate)
    return str(REPO / "build" / "release" / "tools" / "waav" / "waav")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="waav vs faster-whisper: CPU file transcription RTF")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--waav", default=None, help="waav binary (default: build/{release,ci})")
    who.add_argument("--waav-cmd", default=None, help="command used in place of the waav binary")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5)")
    p.add_argument("--threads", type=int, default=fwr.CPU_THREADS, help="threads for both")
    p.add_argument("--model", default=None, help="model folder (default: $WAAV_MODELS_DIR or "
                   "models/, + whisper-tiny.en)")
    p.add_argument("--data", default=None, help="shared data (default: $WAAV_SHARED_DATA or "
                   "../shared/data)")
    p.add_argument("--single", metavar="FILE", help="benchmark this one file only")
    p.add_argument("--json-out", metavar="FILE", help="also write the raw timings as JSON")
    p.add_argument("--cpus", metavar="LIST", help="pin this process and its children to these "
                   "CPUs, e.g. 0,1 (default: no pinning)")
    return p.parse_args(argv)


def audio_files(args) -> list[Path]:
    if args.single:
        return [Path(args.single)]
    data = Path(args.data or os.environ.get("WAAV_SHARED_DATA") or REPO.parent / "shared" / "data")
    speech = data / "speech"
    files = [speech / "jfk.wav"] + sorted((speech / "ljspeech").glob("*.wav"))
    missing = [str(f) for f in files if not f.is_file()]
    if missing or len(files) < 2:
        sys.exit(f"audio not found under {speech}: {missing or 'no LJ Speech clips'}")
    return files


def machine() -> dict[str, str]:
    info = {"cpu": platform.processor() or "unknown", "cpus": str(os.cpu_count())}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(
            (k.strip(), v.strip()) for k, _, v in (l.partition(":") for l in lscpu.splitlines())
        )
        info["cpu"] = fields.get("Model name", info["cpu"])
        info["cpus"] = fields.get("CPU(s)", info["cpus"])
        info["cores_per_socket"] = fields.get("Core(s) per socket", "?")
        info["threads_per_core"] = fields.get("Thread(s) per core", "?")
        info["sockets"] = fields.get("Socket(s)", "?")
    except (OSError, subprocess.CalledProcessError):
        pass
    info["usable_cpus"] = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    info["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["os"] = platform.platform()
    return info


def versions(waav_cmd: list[str]) -> dict[str, str]:
    import ctranslate2
    import faster_whisper
    import numpy
    import soxr

    out = {
        "python": platform.python_version(),
        "faster-whisper": faster_whisper.__version__,
        "ctranslate2": ctranslate2.__version__,
        "numpy": numpy.__version__,
        "soxr (python)": soxr.__version__,
    }
    try:
        v = subprocess.run(waav_cmd + ["--version"], capture_output=True, text=True, timeout=30)
        out["waav"] = (v.stdout.strip() or v.stderr.strip()).splitlines()[0] if v.returncode == 0 \
            else "unknown (no --version)"
    except (OSError, IndexError, subprocess.TimeoutExpired):
        out["waav"] = "unknown"
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, check=True).stdout.strip()
        out["waav source"] = rev
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


class Runner:
    def __init__(self, args, files: list[Path]):
        self.files = [str(f) for f in files]
        self.threads = args.threads
        self.model_dir = args.model or str(
            Path(os.environ.get("WAAV_MODELS_DIR") or REPO / "models") / "whisper-tiny.en")
        if args.waav_cmd:
            self.waav = shlex.split(args.waav_cmd)
            self.waav_label = f"`{args.waav_cmd}`"
        else:
            self.waav = [args.waav or default_waav()]
            if not Path(self.waav[0]).is_file():
                sys.exit(f"waav binary not found: {self.waav[0]} (build it, or pass --waav)")
            self.waav_label = "waav"
        if not Path(self.model_dir, "model.bin").is_file():
            sys.exit(f"model not found: {self.model_dir}/model.bin (run scripts/setup, or --model)")
        t0 = time.perf_counter()
        self.model = fwr.load_model(self.model_dir, cpu_threads=self.threads)
        self.fw_load_s = time.perf_counter() - t0

    def _waav(self, files: list[str], json_out: bool = False) -> str:
        cmd = self.waav + ["transcribe", *files, "--threads", str(self.threads),
                           "--model", self.model_dir] + (["--json"] if json_out else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
        return proc.stdout

    def waav_one_process(self) -> None:
        self._waav(self.files)

    def waav_per_file(self) -> None:
        for f in self.files:
            self._waav([f])

    def faster_whisper(self) -> dict[str, str]:
        return {f: fwr.transcribe_audio(self.model, audio16k.load_16k(f), f)["text"]
                for f in self.files}

    def check_agreement(self) -> str:
        """Untimed warm-up of both, comparing texts: a benchmark of wrong output is no result."""
        lines = [l for l in self._waav(self.files, json_out=True).splitlines() if l.strip()]
        waav_text = {f: json.loads(l)["text"] for f, l in zip(self.files, lines)}
        fw_text = self.faster_whisper()
        same = sum(waav_text.get(f) == fw_text[f] for f in self.files)
        return f"{same} of {len(self.files)} files"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})  # children inherit it
    files = audio_files(args)
    audio_s = sum(audio16k.load_16k(str(f)).size for f in files) / audio16k.TARGET_RATE_HZ
    runner = Runner(args, files)
    n = len(files)
    plural = "s" * (n > 1)
    systems = {f"{runner.waav_label}, one process, {n} file{plural}": runner.waav_one_process}
    if n > 1:
        systems[f"{runner.waav_label}, one process per file"] = runner.waav_per_file
    fw_name = "faster-whisper, model loaded once"
    systems[fw_name] = runner.faster_whisper

    info = machine()
    vers = versions(runner.waav)
    agreement = runner.check_agreement()
    print(f"warm-up round; texts identical to faster-whisper: {agreement}", file=sys.stderr)
    times: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for rep in range(args.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            times[name].append(timed(systems[name]))
        print(f"rep {rep + 1}/{args.reps}: " +
              "; ".join(f"{name} {times[name][-1]:.2f} s" for name in order), file=sys.stderr)

    fw_median = statistics.median(times[fw_name])
    print(f"## CPU file transcription, {n} file{plural}, {audio_s:.1f} s of audio\n")
    print(f"Machine: {info['cpu']}; {info['cpus']} CPUs ({info['sockets']} socket(s) x "
          f"{info.get('cores_per_socket', '?')} cores x {info.get('threads_per_core', '?')} "
          f"threads), usable CPUs {info['usable_cpus']}; load average at start "
          f"{info['loadavg_at_start']}; {info['os']}")
    print("Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(f"Method: {args.reps} repetitions after one warm-up round, order rotated per repetition; "
          f"--threads {args.threads} / cpu_threads={args.threads}; tiny.en greedy (beam 1, "
          "temperature 0), float32; wall-clock times; RTF = time / audio duration.")
    print(f"Sanity check (warm-up round): waav's text identical to faster-whisper's on {agreement}."
          "\n")
    print("| system | median (s) | min (s) | max (s) | RTF (median) | time vs faster-whisper |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        t = times[name]
        med = statistics.median(t)
        print(f"| {name} | {med:.3f} | {min(t):.3f} | {max(t):.3f} | {med / audio_s:.4f} | "
              f"{med / fw_median:.2f}x |")
    print(f"\nfaster-whisper model load (once, not in its row): {runner.fw_load_s:.3f} s")
    if n > 1:
        one = statistics.median(times[names[0]])
        per = statistics.median(times[names[1]])
        print(f"waav per-process overhead (process start + model load), estimated as "
              f"(per-file - one-process) / {n - 1}: {(per - one) / (n - 1):.3f} s")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump({"files": runner.files, "audio_s": audio_s, "reps": args.reps,
                       "threads": args.threads, "machine": info, "versions": vers,
                       "faster_whisper_load_s": runner.fw_load_s, "times_s": times}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
