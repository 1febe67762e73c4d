// OnnxConstants: the named constant tensors of an ONNX model, read through waav's own protobuf
// schema (onnx.proto beside this file).
//
// A constant is a graph initializer or the `value` tensor of a Constant node (named by the node's
// output), in the main graph or in any subgraph at any depth (the then/else branches of If, the
// bodies of Loop and Scan). Exports differ in where they put weights: silero_vad_16k_op15.onnx
// keeps them as initializers, silero_vad.onnx as Constant nodes inside If branches; both read the
// same way.
//
// float32 and int64 tensors are decoded, from raw_data (little-endian) or from the typed fields.
// Tensors of other element types are listed with their dims but no values; asking for one names
// its type. Every tensor's dims and payload size are checked when the file is read, so a corrupt
// or truncated file fails in Read() with an error that names the file and the tensor (or "not an
// ONNX model"); it never crashes. A name defined twice (possible in separate subgraph scopes) is
// kept once and reported as ambiguous when asked for.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace waav::vad {

struct OnnxTensor {
  std::string name;
  std::vector<int64_t> dims;
  int32_t data_type = 0;      // ONNX TensorProto.DataType: 1 float32, 7 int64
  std::vector<float> floats;  // data_type 1
  std::vector<int64_t> ints;  // data_type 7
  int definitions = 1;        // > 1: the name is ambiguous
};

class OnnxConstants {
 public:
  // Files larger than this are refused before they are read (Silero VAD: 1.3 and 2.3 MB).
  static constexpr int64_t kMaxFileBytes = int64_t{256} << 20;

  // Reads and parses `path`. Errors: NotFound (missing file), InvalidArgument (oversized, not an
  // ONNX model, or a tensor with a bad shape or payload), each naming `path`.
  static absl::StatusOr<OnnxConstants> Read(const std::string& path);
  // Parses an in-memory model; `origin` names it in errors (a path, or "<memory>").
  static absl::StatusOr<OnnxConstants> Parse(absl::string_view bytes, const std::string& origin);

  // The float32 tensor `name`, whose dims must equal `dims`.
  absl::StatusOr<absl::Span<const float>> Floats(const std::string& name,
                                                 const std::vector<int64_t>& dims) const;
  // The int64 tensor `name` (any dims).
  absl::StatusOr<absl::Span<const int64_t>> Ints(const std::string& name) const;
  // The tensor `name`, any type; NotFound / InvalidArgument (ambiguous) otherwise.
  absl::StatusOr<const OnnxTensor*> Get(const std::string& name) const;

  // Every constant's name, sorted.
  std::vector<std::string> Names() const;
  const std::string& origin() const { return origin_; }
  int64_t ir_version() const { return ir_version_; }
  // Opset version of the default ("ai.onnx") domain.
  int64_t opset_version() const { return opset_version_; }

 private:
  std::string origin_;
  int64_t ir_version_ = 0;
  int64_t opset_version_ = 0;
  std::map<std::string, OnnxTensor> tensors_;
};

// "[2, 3]", for error messages.
std::string DimsToString(absl::Span<const int64_t> dims);

}  // namespace waav::vad
