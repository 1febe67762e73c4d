// Constructors of the concrete StreamDecoders, for StreamDecoder::Create() only. Each takes a
// format and options that Create() has already checked against the shared limits.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/audio/stream_decoder.h"

namespace waav::audio::internal {

absl::StatusOr<std::unique_ptr<StreamDecoder>> NewRawDecoder(const AudioFormatSpec& format,
                                                             const StreamDecoderOptions& options);
absl::StatusOr<std::unique_ptr<StreamDecoder>> NewFlacDecoder(const AudioFormatSpec& format,
                                                              const StreamDecoderOptions& options);
absl::StatusOr<std::unique_ptr<StreamDecoder>> NewOggOpusDecoder(
    const AudioFormatSpec& format, const StreamDecoderOptions& options);

}  // namespace waav::audio::internal
