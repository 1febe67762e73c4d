// waavd's configuration: every setting with its default, validation, and the one table that
// the YAML file, the environment, the command line, --print-config and docs/server.md share.
//
// Precedence, lowest to highest: the defaults written below, the YAML file (--config or
// WAAV_CONFIG), environment variables (WAAV_<KEY>, e.g. WAAV_LISTEN, WAAV_ENDPOINTING_SILENCE_MS),
// command-line flags (--<key>, e.g. --listen, --endpointing-silence-ms). The environment is read
// in one place only: EnvironmentFromProcess() in config_sources.h, called by main().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace waav::server {

// Endpointing used when a client leaves a field of EndpointingConfig unset. Ranges as in
// proto/waav/v1/recognizer.proto.
struct EndpointingDefaults {
  // Non-speech after speech that ends an utterance. Default: 500 ms; 100..10000.
  int silence_ms = 500;
  // Longest utterance before it is cut. Default: 30000 ms; 1000..30000 (the engine decodes one
  // 30 s Whisper window; the API allows a client up to 120000, which is applied as 30000).
  int max_utterance_ms = 30000;
  // Speech probability at or above which a frame is speech. Default: 0.5; strictly in (0, 1).
  double vad_threshold = 0.5;
  // Speech shorter than this is ignored as noise. Default: 250 ms; 0..5000.
  int min_speech_ms = 250;
  // Audio an utterance the VAD hears cold (a stream's first, or one after 5 s without an
  // utterance) keeps before its first frame judged speech: Silero then judges onsets late.
  // Default: 400 ms; 0..1000. Server-wide, not per request.
  int cold_start_pad_ms = 400;
};

struct ServerConfig {
  // ---- Network -------------------------------------------------------------------------------
  // gRPC API address, HOST:PORT. Port 0 binds a free port (see port_file). Default:
  // "127.0.0.1:50051" (loopback only; use 0.0.0.0:50051 to serve other hosts).
  std::string listen = "127.0.0.1:50051";
  // Admin HTTP address (/metrics, /healthz, /readyz), HOST:PORT; empty disables it. Port 0
  // binds a free port. Default: "127.0.0.1:9464".
  std::string metrics_listen = "127.0.0.1:9464";
  // When set, the bound addresses are written there once both listeners are up, one per line:
  // "grpc HOST:PORT" and "metrics HOST:PORT" (written to a temporary file, then renamed).
  // Default: "" (not written).
  std::string port_file;

  // ---- Model and compute ---------------------------------------------------------------------
  // Folder of the Whisper model (model.bin, tokenizer.json in CTranslate2 format).
  // Default: the models folder configured at build time, then "whisper-tiny.en".
  std::string model_dir = DefaultModelDir();
  // Voice-activity model: the Silero VAD ONNX file, or "energy" for a simple energy detector
  // (no model file; for tests and emergencies: it lets noise through that Silero keeps out).
  // Default: the models folder configured at build time, then
  // "silero-vad/silero_vad_16k_op15.onnx".
  std::string vad_model = DefaultVadModel();
  // Name clients use in RecognitionConfig.model and see in ListModels. Default: "" (the model
  // folder's own name, e.g. "whisper-tiny.en").
  std::string model_name;
  // Compute backend: auto, cpu, cuda, hip or vulkan (those compiled in). Default: "auto".
  std::string backend = "auto";
  // CPU threads for each backend instance; 0 means all cores. Default: 0.
  int threads = 0;
  // The GPU the cuda and hip backends (and auto) run on: its ordinal among the GPUs this process
  // sees (after CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES). A named GPU backend fails to start
  // on an ordinal that is not there; auto then falls back to the CPU, as it does without a GPU.
  // Default: 0; 0..1023.
  int gpu_device = 0;
  // L2 cache (MiB) a GPU backend keeps for the encoder output that decoder steps of more than 8
  // rows read at every layer and step (the CUDA backend sets it aside while it runs); 0: none.
  // Default: 0 (on an H100, 16 made such steps 1-5.5% faster but the encoder passes beside the
  // kept lines 5-6% slower: docs/gpu.md); 0..1024.
  int gpu_l2_encoder_mb = 0;
  // Workers (each with its own copy of the model) running whole-file Recognize requests, apart
  // from the streaming engine. Default: 1; 1..64.
  int offline_workers = 1;
  // Recognize requests that may wait for a worker; more are refused with RESOURCE_EXHAUSTED.
  // Default: 16; 0..10000.
  int max_queued_recognize = 16;

  // ---- Limits --------------------------------------------------------------------------------
  // Concurrent StreamingRecognize streams; one more is refused with RESOURCE_EXHAUSTED at once.
  // Default: 16; 1..100000.
  int max_streams = 16;
  // Largest request message gRPC accepts (a larger one is RESOURCE_EXHAUSTED); bounds a
  // Recognize file. Default: 8388608 (8 MiB); 1024..1073741824.
  int64_t max_message_bytes = int64_t{8} << 20;
  // Longest stream, in seconds of audio received or of wall time, whichever comes first; the
  // stream then gets its final results and ends with DEADLINE_EXCEEDED. Default: 3600 s;
  // 1..86400.
  double max_stream_duration_s = 3600;
  // A stream that sends no message for this long (while the server is waiting for one) ends
  // with DEADLINE_EXCEEDED. Default: 30 s; 0.1..3600.
  double idle_timeout_s = 30;
  // Slots of 100 ms audio in the engine's ingest ring, shared by all streams; when it is full
  // the server stops reading the stream that could not push and retries. Default: 4096.
  int ingest_ring_slots = 4096;
  // Most utterance windows, of different streams, the engine's scheduler decodes as one batch
  // (one encoder pass per window, then every window's decoder steps as one batched step);
  // 1: one window at a time. Each costs a decoder slot (tiny.en: about 24 MB). Default: 8;
  // 1..256.
  int max_batch = 8;
  // Interim results encode a window of about their audio's length (the audio and 2 s of
  // silence, rounded up to a multiple of this) instead of 30 s; finals keep 30 s windows.
  // 0: 30 s windows. -1 (auto): 5000 on the CPU backend, 0 on a GPU (not yet measured to pay
  // there). Default: -1; -1, 0 or 1000..30000.
  int partial_window_ms = -1;
  // An interim result's decoding stops once its words start over from the utterance's first
  // word with a run of this many words (Whisper does it on short windows above all; the result
  // would cut the restart anyway, and a batch's steps last as long as its longest row).
  // 0: never. Default: 4 (speakers do repeat an utterance's first three words: "the invention
  // of ... as the invention of the art"); 0 or 2..16.
  int restart_stop_words = 4;
  // CPU threads of the voice-activity model, which runs every stream's audio on the engine's
  // front-end thread as one batch per round (~14 µs per stream per 32 ms frame on one core;
  // 1024 streams take ~45% of a core). 0 (auto): 1 on machines of up to 7 hardware threads
  // (the CPU Whisper backend needs the cores), else min(4, threads / 8 + 1). Default: 0; 0..16.
  int vad_threads = 0;

  // ---- Shutdown ------------------------------------------------------------------------------
  // After SIGTERM or SIGINT: time in-flight requests get to finish before the rest are closed
  // with UNAVAILABLE. Default: 25 s (below Kubernetes' default 30 s termination grace);
  // 0..3600.
  double shutdown_grace_s = 25;

  // ---- Recognition defaults ------------------------------------------------------------------
  EndpointingDefaults endpointing;
  // Speech between two interim results of a stream. Default: 500 ms; 100..10000.
  int partial_interval_ms = 500;
  // Silence after speech that decodes an interim result at once (the words before a pause, not
  // up to partial_interval_ms later). Default: 32 ms (the first silent VAD frame); 0 (off)..10000.
  int pause_partial_ms = 32;
  // A drop in level this many dB below the speech's recent peak (a gap between words) decodes an
  // interim result at once, with the word before it, once gap_partial_min_ms of speech came
  // since the last one. Default: 0 (off); 0..60. Spacing: default 200 ms; 0..10000.
  int gap_partial_db = 0;
  // An interim result this long after an utterance's start is detected (its first words would
  // otherwise wait for the interval). Default: 0 (at once); -1 (off)..10000.
  int start_partial_ms = 0;
  int gap_partial_min_ms = 200;
  // Interim results commit no word (stable, forced into later results) from a window holding less
  // than this much of the utterance. Default: 1000 ms; 0 (no minimum)..30000.
  int commit_min_audio_ms = 1000;

  // ---- Observability -------------------------------------------------------------------------
  // Per-stage latency budget overrides, "name=ms[,name=ms...]" (names: capture, preprocessing,
  // stt, processing, tts, output, margin, end_to_end, and the inner steps ingest_wait, frontend,
  // encoder, decoder_step, queue). In YAML also a map. Default: "" (design.md's budgets).
  std::string latency_budgets;
  // trace, debug, info, warn, error, critical or off. Default: "info".
  std::string log_level = "info";

  // Stops start-up when it fails: the message names the setting, the value and what is allowed.
  [[nodiscard]] absl::Status Validate() const;

  // The model folder waavd uses when none is configured.
  static std::string DefaultModelDir();
  static std::string DefaultVadModel();
};

// Host and port of a HOST:PORT address. IPv6 hosts are written in brackets ("[::1]:50051").
struct HostPort {
  std::string host;
  int port = 0;
};
absl::Status ParseHostPort(const std::string& address, HostPort* out);

// The name ListModels reports: model_name, or the last component of model_dir.
std::string EffectiveModelName(const ServerConfig& config);

// The VAD's CPU threads: config.vad_threads, or for 0 (auto) the rule documented there for a
// machine of `hardware_threads`.
int EffectiveVadThreads(const ServerConfig& config, int hardware_threads);

// Interim windows' step (EngineOptions::partial_window_ms): config.partial_window_ms, or for -1
// (auto) 5000 where Whisper runs on the CPU and 0 elsewhere.
int EffectivePartialWindowMs(const ServerConfig& config, bool whisper_on_cpu);

}  // namespace waav::server
