// fake-waavd: the scripted FakeRecognizer as a process, for trying clients and scripts
// (bench/streaming_latency.sh --waavd build/ci/tests/support/fake-waavd) without a model. Every
// stream hears the same regular script (RegularScript: utterances of 8 words, 1 s apart),
// whatever audio it is sent. Serves until SIGINT or SIGTERM.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tests/support/fake_recognizer.h"

int main(int argc, char** argv) {
  waav::testing::FakeRecognizerOptions options;
  options.script = waav::testing::RegularScript(200, 8, 1000);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      options.listen = argv[++i];
    } else if (arg == "--max-streams" && i + 1 < argc) {
      options.max_streams = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: fake-waavd [--listen HOST:PORT] [--max-streams N]" << std::endl;
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before gRPC starts its threads
  auto fake = waav::testing::FakeRecognizer::Start(options);
  if (fake == nullptr) {
    std::cerr << "fake-waavd: cannot listen on " << options.listen << std::endl;
    return 1;
  }
  std::cerr << "fake-waavd: listening on " << fake->address() << std::endl;
  int signal = 0;
  sigwait(&signals, &signal);
  fake->SetServing(false);
  std::cerr << "fake-waavd: stopping on signal " << signal << std::endl;
  return 0;
}
