# waavd in a container: built from this repository on Debian 12, CPU backend (the CUDA backend is
# compiled in when the build image has nvcc; this one does not). Models are not baked in: mount
# the folder scripts/setup fills at /models (see deploy/compose.yaml).
#
#   docker build -t waav/waavd .
#   docker run -p 50051:50051 -p 9464:9464 -v "$PWD/models:/models:ro" waav/waavd
FROM debian:bookworm AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates python3 python3-pip python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Debian packages only; the image gets its models from the mounted /models.
RUN scripts/setup --models "" \
 && cmake --preset release -DWAAV_MODELS_DIR=/models \
 && cmake --build --preset release --target waavd waav

FROM debian:bookworm-slim
# The run-time halves of the -dev packages the build used.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 libyaml-cpp0.7 \
      libsoxr0 libopenblas0-pthread libflac12 libopus0 libogg0 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 waav
COPY --from=build /src/build/release/server/waavd /src/build/release/tools/waav/waav /usr/local/bin/
USER waav
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s CMD ["waav", "health", "--server", "127.0.0.1:50051"]
ENTRYPOINT ["waavd", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464", \
            "--model-dir", "/models/whisper-tiny.en", \
            "--vad-model", "/models/silero-vad/silero_vad_16k_op15.onnx"]
