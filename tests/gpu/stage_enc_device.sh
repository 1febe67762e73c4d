#!/usr/bin/env bash
# Encoder work (issue 5, encoder at batch 1): builds cuda_backend_test, whisper_graph_cuda_test
# (random weights only there: the real model does not travel) and whisper_gpu_bench here and
# stages them with the libraries they need, the PyTorch anchor and tests/gpu/enc_device.sh into
# DEST for the device tool (tests/gpu/stage_device.sh does the staging). There:
#   bash .device/enc/enc_device.sh        (carry [".device/enc"]; results under $OUT)
#
#   tests/gpu/stage_enc_device.sh [BUILD_DIR] [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
WAAV_STAGE_TARGETS="cuda_backend_test whisper_gpu_bench whisper_graph_cuda_test" \
  WAAV_STAGE_SCRIPTS="tests/gpu/enc_device.sh" \
  exec tests/gpu/stage_device.sh "${1:-build/ci}" "${2:-.device/enc}"
