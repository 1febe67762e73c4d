#include "server/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/metrics/batch_metrics.h"
#include "engine/metrics/latency_budgets.h"
#include "engine/metrics/registry.h"
#include "engine/metrics/stage_metrics.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"
#include "engine/runtime/status.h"
#include "engine/streaming/streaming_engine.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/admin_http.h"
#include "server/offline_recognizer.h"
#include "server/recognizer_service.h"
#include "server/service_runtime.h"
#include "server/vad_factory.h"
#include "server/version.h"
#include "spdlog/spdlog.h"

namespace waav::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kServiceName[] = "waav.v1.Recognizer";
// After the grace period: how long gRPC gets to deliver the last statuses before it cancels
// what is left. gRPC also waits this long for clients to close idle connections.
constexpr auto kShutdownDeadline = std::chrono::seconds(2);
// The watchdog ticks streams this often; queue depths are sampled on every round, the backends'
// statistics (a pool lock each) every kBackendSampleRounds rounds, so every 200 ms.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(20);
constexpr int kBackendSampleRounds = 10;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void SetHealth(grpc::Server* server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

// "grpc HOST:PORT" and "metrics HOST:PORT", written whole (temporary file, then rename) so a
// reader never sees half of it.
absl::Status WritePortFile(const std::string& path, const std::string& grpc_address,
                           const std::string& metrics_address) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "grpc " << grpc_address << "\n";
    if (!metrics_address.empty()) out << "metrics " << metrics_address << "\n";
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error)
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, ": ", error.message()));
  return absl::OkStatus();
}

// Waits up to `timeout` for SIGTERM/SIGINT (blocked in every thread); returns the signal or 0.
int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000);
  const int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

class Daemon {
 public:
  explicit Daemon(const ServerConfig& config) : config_(config) {}

  int Run(const sigset_t& signals) {
    if (absl::Status s = Start(); !s.ok()) {
      spdlog::critical("waavd cannot start: {}", std::string(s.message()));
      Stop();
      return 1;
    }
    int sig = 0;
    while (sig == 0) sig = WaitForSignal(signals, std::chrono::seconds(3600));
    Drain(signals, sig);
    Stop();
    spdlog::info("waavd stopped");
    return 0;
  }

 private:
  absl::Status Start() {
    metrics::LatencyBudgets budgets;
    RETURN_IF_ERROR(budgets.ApplyOverrides(config_.latency_budgets));
    ASSIGN_OR_RETURN(stage_metrics_, metrics::StageMetrics::Create(&registry_, budgets));
    ASSIGN_OR_RETURN(metrics_, ServerMetrics::Create(&registry_));
    RETURN_IF_ERROR(
        metrics_->SetBuildInfo(kVersion, kRevision, absl::StrJoin(RegisteredBackends(), ",")));
    admission_ = std::make_unique<Admission>(config_.max_streams, &metrics_->streams_active());
    ASSIGN_OR_RETURN(batch_metrics_, metrics::BatchMetrics::Create(&registry_));
    watchdog_ = std::make_unique<StreamWatchdog>(kWatchdogPeriod, [this] { SampleMetrics(); });

    BackendOptions backend_options;
    backend_options.num_threads = config_.threads;
    backend_options.device_index = config_.gpu_device;
    backend_options.gpu_l2_encoder_bytes = int64_t{config_.gpu_l2_encoder_mb} << 20;
    ASSIGN_OR_RETURN(backend_, CreateBackend(config_.backend, backend_options));
    model_.name = EffectiveModelName(config_);
    model_.languages = LanguagesForModel(model_.name);
    model_.backend = std::string(backend_->name());
    runtime_ = ServiceRuntime{.config = &config_,
                              .state = &state_,
                              .model = &model_,
                              .admission = admission_.get(),
                              .watchdog = watchdog_.get(),
                              .metrics = metrics_.get(),
                              .stage_metrics = stage_metrics_.get()};

    std::string metrics_address;
    if (!config_.metrics_listen.empty()) {
      AdminHttpOptions options;
      options.address = config_.metrics_listen;
      ASSIGN_OR_RETURN(admin_, AdminHttpServer::Start(
                                   options, {.metrics = [this] { return registry_.Serialize(); },
                                             .ready = [this] { return state_.ready(); }}));
      metrics_address = admin_->address();
    }

    // Served before the models load, so health checks see NOT_SERVING rather than a closed port.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    service_ = std::make_unique<RecognizerService>(runtime_, kVersion);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(config_.listen, grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes));
    // gRPC sets SO_REUSEPORT by default, which lets a second daemon bind the same port and
    // silently share its traffic; a port in use must be a start-up error instead.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", config_.listen,
                                                 " (in use, or not a local "
                                                 "address?)"));
    }
    SetHealth(server_.get(), false);
    HostPort listen;
    RETURN_IF_ERROR(ParseHostPort(config_.listen, &listen));
    const std::string grpc_address = absl::StrCat(
        listen.host.find(':') != std::string::npos ? "[" + listen.host + "]" : listen.host, ":",
        port);
    spdlog::info("waavd {} listening: grpc={} metrics={}; loading {} on {}", kVersion, grpc_address,
                 metrics_address.empty() ? "off" : metrics_address, config_.model_dir,
                 backend_->Describe());
    if (!config_.port_file.empty()) {
      RETURN_IF_ERROR(WritePortFile(config_.port_file, grpc_address, metrics_address));
    }
    return LoadModels();
  }

  absl::Status LoadModels() {
    const auto start = Clock::now();
    // Short windows for partials: the model must take them (on a GPU its step may then leave the
    // prepared step and the absorbed cross-attention for batches that hold one).
    const int partial_window_ms =
        EffectivePartialWindowMs(config_, backend_->device() == DeviceKind::kCpu);
    whisper::WhisperModelOptions model_options;
    model_options.short_windows =
        partial_window_ms > 0 ? whisper::GraphUse::kAlways : whisper::GraphUse::kNever;
    ASSIGN_OR_RETURN(transcriber_,
                     whisper::Transcriber::Load(config_.model_dir, *backend_, model_options));
    if (partial_window_ms > 0) {
      spdlog::info("interim windows: the audio and 2 s of silence, rounded up to {} ms",
                   partial_window_ms);
    } else {
      spdlog::info("interim windows: 30 s (partial_window_ms 0)");
    }
    // One load of the Whisper model (the offline workers' copies take as long again each).
    RETURN_IF_ERROR(
        metrics_->SetModelLoadSeconds(model_.name, model_.backend, SecondsSince(start)));
    // The VAD runs on the engine's frontend worker thread while Whisper runs on its scheduler:
    // a backend serves one thread at a time, so the VAD gets its own CPU one (vad_threads:
    // with many streams its batch per round is worth a few threads on a large machine).
    const auto vad_start = Clock::now();
    BackendOptions vad_options;
    vad_options.num_threads = EffectiveVadThreads(
        config_, std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
    ASSIGN_OR_RETURN(vad_backend_, CreateBackend("cpu", vad_options));
    ASSIGN_OR_RETURN(vad_, CreateVad(config_, *vad_backend_));
    RETURN_IF_ERROR(metrics_->SetModelLoadSeconds(absl::StrCat(VadName(config_), "_vad"),
                                                  std::string(vad_backend_->name()),
                                                  SecondsSince(vad_start)));
    streaming::EngineOptions options;
    options.max_streams = config_.max_streams;
    options.ingest_ring_slots = config_.ingest_ring_slots;
    options.max_batch = config_.max_batch;
    options.partial_window_ms = partial_window_ms;
    options.restart_stop_words = config_.restart_stop_words;
    options.stage_metrics = stage_metrics_.get();
    options.batch_metrics = batch_metrics_.get();
    ASSIGN_OR_RETURN(auto engine,
                     streaming::StreamingEngine::Create(options, *transcriber_, *vad_));
    engine_ = WrapStreamingEngine(std::move(engine));
    ASSIGN_OR_RETURN(offline_, OfflineRecognizer::Create(config_));
    const double seconds = SecondsSince(start);
    RETURN_IF_ERROR(metrics_->AddBackend(backend_.get()));
    RETURN_IF_ERROR(metrics_->AddBackend(vad_backend_.get()));
    for (const Backend* b : offline_->backends()) RETURN_IF_ERROR(metrics_->AddBackend(b));
    metrics_->SampleBackends();
    runtime_.engine = engine_.get();
    runtime_.offline = offline_.get();
    state_.SetLoaded();  // publishes runtime_.engine and runtime_.offline to the handlers
    SetHealth(server_.get(), true);
    spdlog::info(
        "waavd ready: model {} ({} VAD, {} offline worker(s)) loaded in {:.2f} s; up to "
        "{} streams",
        model_.name, VadName(config_), config_.offline_workers, seconds, config_.max_streams);
    return absl::OkStatus();
  }

  // On the watchdog's thread, once per round.
  void SampleMetrics() {
    if (!state_.loaded()) return;  // the engine and backends are published with `loaded`
    metrics_->ingest_queue_depth().Set(static_cast<double>(engine_->ingest_depth()));
    metrics_->scheduler_queue_depth().Set(static_cast<double>(engine_->scheduler_depth()));
    if (++sample_round_ % kBackendSampleRounds == 0) metrics_->SampleBackends();
  }

  void Drain(const sigset_t& signals, int sig) {
    spdlog::info("waavd: {} received: draining, up to {} s for {} stream(s) in flight",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", config_.shutdown_grace_s,
                 admission_->active());
    state_.StartDraining();
    SetHealth(server_.get(), false);
    if (engine_ != nullptr) engine_->StopAccepting();
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(config_.shutdown_grace_s));
    auto busy = [this] {
      return admission_->active() > 0 || (offline_ != nullptr && offline_->outstanding() > 0);
    };
    while (busy() && Clock::now() < deadline) {
      if (WaitForSignal(signals, std::chrono::milliseconds(50)) != 0) {
        spdlog::warn("waavd: second signal: not waiting for the grace period");
        break;
      }
    }
    if (busy()) {
      spdlog::warn("waavd: closing {} stream(s) still open", admission_->active());
      const absl::Status status = absl::UnavailableError(
          "the server is shutting down and its grace period is over; continue on another "
          "instance");
      watchdog_->ForEach([&](StreamWatchdog::Client* client) { client->Abort(status); });
    }
  }

  void Stop() {
    if (offline_ != nullptr) offline_->Shutdown();  // queued requests get UNAVAILABLE
    if (server_ != nullptr) {
      const auto start = Clock::now();
      server_->Shutdown(std::chrono::system_clock::now() + kShutdownDeadline);
      spdlog::debug("waavd: gRPC server stopped in {:.3f} s", SecondsSince(start));
    }
    if (admin_ != nullptr) admin_->Stop();
  }

  const ServerConfig config_;
  metrics::Registry registry_;
  std::unique_ptr<metrics::StageMetrics> stage_metrics_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<metrics::BatchMetrics> batch_metrics_;
  int sample_round_ = 0;  // the watchdog's thread only
  ServerState state_;
  std::unique_ptr<Admission> admission_;
  ModelDescription model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<whisper::Transcriber> transcriber_;
  std::unique_ptr<Backend> vad_backend_;  // the engine's frontend worker only
  std::unique_ptr<streaming::VoiceActivityModel> vad_;
  std::unique_ptr<StreamEngine> engine_;
  std::unique_ptr<OfflineRecognizer> offline_;
  // Reactors unregister from the watchdog and call the engine until their OnDone, so both
  // outlive the gRPC server (members are destroyed in reverse order).
  std::unique_ptr<StreamWatchdog> watchdog_;
  ServiceRuntime runtime_;
  std::unique_ptr<RecognizerService> service_;
  std::unique_ptr<AdminHttpServer> admin_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace

int RunDaemon(const ServerConfig& config) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is an error code, not a dead daemon
  Daemon daemon(config);
  return daemon.Run(signals);
}

}  // namespace waav::server
