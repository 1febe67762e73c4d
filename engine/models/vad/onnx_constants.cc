#include "engine/models/vad/onnx_constants.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/models/vad/onnx.pb.h"
#include "engine/runtime/status.h"

namespace waav::vad {
namespace {

constexpr int32_t kFloat = onnx::TensorProto::FLOAT;
constexpr int32_t kInt64 = onnx::TensorProto::INT64;
// ONNX IR versions run 1..11 today; anything far outside is not an ONNX file.
constexpr int64_t kMaxIrVersion = 64;
// Tensors of rank above this are not plausible model constants.
constexpr int kMaxRank = 16;

std::string TypeName(int32_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::FLOAT:
      return "float32";
    case onnx::TensorProto::UINT8:
      return "uint8";
    case onnx::TensorProto::INT8:
      return "int8";
    case onnx::TensorProto::UINT16:
      return "uint16";
    case onnx::TensorProto::INT16:
      return "int16";
    case onnx::TensorProto::INT32:
      return "int32";
    case onnx::TensorProto::INT64:
      return "int64";
    case onnx::TensorProto::STRING:
      return "string";
    case onnx::TensorProto::BOOL:
      return "bool";
    case onnx::TensorProto::FLOAT16:
      return "float16";
    case onnx::TensorProto::DOUBLE:
      return "float64";
    case onnx::TensorProto::UINT32:
      return "uint32";
    case onnx::TensorProto::UINT64:
      return "uint64";
    case onnx::TensorProto::BFLOAT16:
      return "bfloat16";
    default:
      return absl::StrCat("ONNX type ", data_type);
  }
}

// Walks a model's graphs and fills `tensors`; every error names `origin`.
class Collector {
 public:
  Collector(const std::string& origin, size_t file_bytes,
            std::map<std::string, OnnxTensor>& tensors)
      : origin_(origin), file_bytes_(file_bytes), tensors_(tensors) {}

  absl::Status Graph(const onnx::GraphProto& graph, const std::string& where) {
    for (const onnx::TensorProto& t : graph.initializer()) {
      RETURN_IF_ERROR(Add(t, t.name(), absl::StrCat("initializer of ", where)));
    }
    for (int n = 0; n < graph.node_size(); ++n) {
      const onnx::NodeProto& node = graph.node(n);
      const std::string node_where =
          absl::StrCat("node ", n, " ('", node.name(), "', ", node.op_type(), ") of ", where);
      if (node.op_type() == "Constant" && (node.domain().empty() || node.domain() == "ai.onnx")) {
        RETURN_IF_ERROR(Constant(node, node_where));
      }
      // Subgraphs: If's branches, Loop's and Scan's bodies.
      for (const onnx::AttributeProto& attr : node.attribute()) {
        if (attr.has_g()) {
          RETURN_IF_ERROR(
              Graph(attr.g(), absl::StrCat("subgraph '", attr.name(), "' of ", node_where)));
        }
        for (int g = 0; g < attr.graphs_size(); ++g) {
          RETURN_IF_ERROR(Graph(attr.graphs(g), absl::StrCat("subgraph '", attr.name(), "' #", g,
                                                             " of ", node_where)));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": ", what));
  }

  // A Constant node's value: a tensor, or one of the scalar/list shorthands.
  absl::Status Constant(const onnx::NodeProto& node, const std::string& where) {
    if (node.output_size() != 1 || node.output(0).empty()) {
      return Error(
          absl::StrCat(where, " has ", node.output_size(), " outputs; a Constant has one"));
    }
    const std::string& name = node.output(0);
    for (const onnx::AttributeProto& attr : node.attribute()) {
      OnnxTensor t;
      t.name = name;
      if (attr.name() == "value") {
        if (!attr.has_t()) return Error(absl::StrCat(where, ": attribute 'value' holds no tensor"));
        return Add(attr.t(), name, where);
      } else if (attr.name() == "value_float") {
        t.data_type = kFloat;
        t.floats = {attr.f()};
      } else if (attr.name() == "value_floats") {
        t.data_type = kFloat;
        t.floats.assign(attr.floats().begin(), attr.floats().end());
        t.dims = {static_cast<int64_t>(t.floats.size())};
      } else if (attr.name() == "value_int") {
        t.data_type = kInt64;
        t.ints = {attr.i()};
      } else if (attr.name() == "value_ints") {
        t.data_type = kInt64;
        t.ints.assign(attr.ints().begin(), attr.ints().end());
        t.dims = {static_cast<int64_t>(t.ints.size())};
      } else {
        continue;  // value_string(s), sparse_value: not numeric constants
      }
      Insert(std::move(t));
      return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Add(const onnx::TensorProto& proto, const std::string& name,
                   const std::string& where) {
    if (name.empty()) return Error(absl::StrCat("unnamed tensor in ", where));
    const std::string what = absl::StrCat("tensor '", name, "' (", where, ")");
    OnnxTensor t;
    t.name = name;
    if (proto.dims_size() > kMaxRank) {
      return Error(
          absl::StrCat(what, " has rank ", proto.dims_size(), " (more than ", kMaxRank, ")"));
    }
    // No element takes less than one bit of the file, which bounds the element count (and rules
    // out overflow in the product) before the payload is looked at.
    const int64_t max_numel = 8 * static_cast<int64_t>(file_bytes_);
    int64_t numel = 1;
    for (int64_t d : proto.dims()) {
      if (d < 0)
        return Error(absl::StrCat(what, " has a negative dimension: ", DimsToString(proto.dims())));
      if (d != 0 && numel > max_numel / d) {
        return Error(absl::StrCat(what, " has dims ", DimsToString(proto.dims()),
                                  ", more elements than the file can hold"));
      }
      numel *= d;
      t.dims.push_back(d);
    }
    if (!proto.has_data_type() || proto.data_type() == onnx::TensorProto::UNDEFINED) {
      return Error(absl::StrCat(what, " has no element type"));
    }
    t.data_type = proto.data_type();
    if (proto.has_data_location() && proto.data_location() == onnx::TensorProto::EXTERNAL) {
      return Error(absl::StrCat(what,
                                " is stored in an external data file, which waav does not "
                                "read"));
    }
    if (t.data_type == kFloat) {
      RETURN_IF_ERROR(Decode(proto, what, numel, proto.float_data(), t.floats));
    } else if (t.data_type == kInt64) {
      RETURN_IF_ERROR(Decode(proto, what, numel, proto.int64_data(), t.ints));
    }
    Insert(std::move(t));
    return absl::OkStatus();
  }

  // The payload is raw_data (little-endian, like x86-64 and every target waav builds for) or the
  // typed field, never both, and holds exactly `numel` elements.
  template <typename T, typename Repeated>
  absl::Status Decode(const onnx::TensorProto& proto, const std::string& what, int64_t numel,
                      const Repeated& typed, std::vector<T>& out) {
    static_assert(std::endian::native == std::endian::little, "raw_data is little-endian");
    const int64_t typed_count = static_cast<int64_t>(typed.size());
    if (proto.has_raw_data() && typed_count > 0) {
      return Error(absl::StrCat(what, " has both raw_data and ", typed_count, " typed values"));
    }
    if (proto.has_raw_data()) {
      const std::string& raw = proto.raw_data();
      if (static_cast<int64_t>(raw.size()) != numel * static_cast<int64_t>(sizeof(T))) {
        return Error(absl::StrCat(what, " of ", TypeName(proto.data_type()), " ",
                                  DimsToString(proto.dims()), " needs ", numel * sizeof(T),
                                  " bytes of raw_data, has ", raw.size()));
      }
      out.resize(static_cast<size_t>(numel));
      if (numel > 0) std::memcpy(out.data(), raw.data(), raw.size());
      return absl::OkStatus();
    }
    if (typed_count != numel) {
      return Error(absl::StrCat(what, " of ", TypeName(proto.data_type()), " ",
                                DimsToString(proto.dims()), " needs ", numel, " values, has ",
                                typed_count));
    }
    out.assign(typed.begin(), typed.end());
    return absl::OkStatus();
  }

  void Insert(OnnxTensor t) {
    auto [it, inserted] = tensors_.try_emplace(t.name, std::move(t));
    if (!inserted) ++it->second.definitions;
  }

  const std::string& origin_;
  const size_t file_bytes_;
  std::map<std::string, OnnxTensor>& tensors_;
};

}  // namespace

std::string DimsToString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<OnnxConstants> OnnxConstants::Read(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": cannot read: ", ec.message()));
  if (size > static_cast<uintmax_t>(kMaxFileBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size, " bytes is more than the ",
                                                   kMaxFileBytes,
                                                   " bytes waav reads as an ONNX "
                                                   "model"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size)) {
    return absl::DataLossError(absl::StrCat(path, ": read ", in.gcount(), " of ", size, " bytes"));
  }
  return Parse(bytes, path);
}

absl::StatusOr<OnnxConstants> OnnxConstants::Parse(absl::string_view bytes,
                                                   const std::string& origin) {
  if (bytes.size() > static_cast<size_t>(kMaxFileBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", bytes.size(), " bytes is more than an ONNX model may have"));
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": not an ONNX model (protobuf parsing failed: truncated or corrupt file)"));
  }
  if (!model.has_ir_version() || !model.has_graph()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not an ONNX model (",
                     model.has_ir_version() ? "no graph" : "no ir_version", ")"));
  }
  if (model.ir_version() < 1 || model.ir_version() > kMaxIrVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not an ONNX model (ir_version ", model.ir_version(), ")"));
  }
  OnnxConstants out;
  out.origin_ = origin;
  out.ir_version_ = model.ir_version();
  for (const onnx::OperatorSetIdProto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") out.opset_version_ = opset.version();
  }
  if (out.opset_version_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": the model imports no ai.onnx operator set (truncated or not an ONNX model)"));
  }
  Collector collector(origin, bytes.size(), out.tensors_);
  RETURN_IF_ERROR(collector.Graph(model.graph(), "the main graph"));
  return out;
}

absl::StatusOr<const OnnxTensor*> OnnxConstants::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(origin_, ": no constant tensor named '", name, "'"));
  }
  if (it->second.definitions > 1) {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": constant '", name, "' is defined ",
                                                   it->second.definitions, " times"));
  }
  return &it->second;
}

absl::StatusOr<absl::Span<const float>> OnnxConstants::Floats(
    const std::string& name, const std::vector<int64_t>& dims) const {
  ASSIGN_OR_RETURN(const OnnxTensor* t, Get(name));
  if (t->data_type != kFloat) {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": tensor '", name, "' is ",
                                                   TypeName(t->data_type), ", not float32"));
  }
  if (t->dims != dims) {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": tensor '", name, "' has shape ",
                                                   DimsToString(t->dims), ", expected ",
                                                   DimsToString(dims)));
  }
  return absl::Span<const float>(t->floats);
}

absl::StatusOr<absl::Span<const int64_t>> OnnxConstants::Ints(const std::string& name) const {
  ASSIGN_OR_RETURN(const OnnxTensor* t, Get(name));
  if (t->data_type != kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin_, ": tensor '", name, "' is ", TypeName(t->data_type), ", not int64"));
  }
  return absl::Span<const int64_t>(t->ints);
}

std::vector<std::string> OnnxConstants::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

}  // namespace waav::vad
