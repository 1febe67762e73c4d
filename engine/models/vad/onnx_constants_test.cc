// Tests of the ONNX constant reader: synthetic models built with waav's own schema (every place a
// constant can live, every payload form, every error), the two Silero VAD exports when
// scripts/fetch_vad has run, and damaged files (truncated at many offsets, random byte flips, a
// file that is not ONNX, an oversized one), which must fail with an error naming the file.
#include "engine/models/vad/onnx_constants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/vad/onnx.pb.h"
#include "tests/support/test_env.h"

namespace waav::vad {
namespace {

namespace fs = std::filesystem;

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

onnx::TensorProto RawFloats(const std::string& name, std::vector<int64_t> dims,
                            const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return t;
}

onnx::TensorProto TypedInts(const std::string& name, std::vector<int64_t> dims,
                            const std::vector<int64_t>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

onnx::NodeProto ConstantNode(const std::string& output, const onnx::TensorProto& value) {
  onnx::NodeProto node;
  node.set_op_type("Constant");
  node.set_name(output + "_node");
  node.add_output(output);
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  *attr->mutable_t() = value;
  return node;
}

onnx::ModelProto EmptyModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(16);
  model.mutable_graph()->set_name("main");
  return model;
}

// A model with constants in every place the reader looks.
onnx::ModelProto SampleModel() {
  onnx::ModelProto model = EmptyModel();
  onnx::GraphProto* g = model.mutable_graph();
  *g->add_initializer() = RawFloats("w_raw", {2, 3}, {1, 2, 3, 4, 5, 6});
  onnx::TensorProto typed;
  typed.set_name("w_typed");
  typed.set_data_type(onnx::TensorProto::FLOAT);
  typed.add_dims(4);
  for (float v : {0.5f, -1.5f, 1e-30f, 3e30f}) typed.add_float_data(v);
  *g->add_initializer() = typed;
  onnx::TensorProto raw_int;
  raw_int.set_name("i_raw");
  raw_int.set_data_type(onnx::TensorProto::INT64);
  const int64_t big = -(int64_t{1} << 40);
  raw_int.set_raw_data(std::string(reinterpret_cast<const char*>(&big), 8));  // scalar
  *g->add_initializer() = raw_int;
  onnx::TensorProto flags;
  flags.set_name("flags");
  flags.set_data_type(onnx::TensorProto::BOOL);
  flags.add_dims(2);
  flags.set_raw_data(std::string("\x01\x00", 2));
  *g->add_initializer() = flags;
  *g->add_node() = ConstantNode("c_main", TypedInts("ignored", {2}, {3, -4}));

  // value_float / value_ints shorthands.
  onnx::NodeProto* shorthand = g->add_node();
  shorthand->set_op_type("Constant");
  shorthand->add_output("c_float");
  onnx::AttributeProto* a = shorthand->add_attribute();
  a->set_name("value_float");
  a->set_f(0.25f);
  shorthand = g->add_node();
  shorthand->set_op_type("Constant");
  shorthand->add_output("c_ints");
  a = shorthand->add_attribute();
  a->set_name("value_ints");
  a->add_ints(7);
  a->add_ints(8);

  // If: then_branch holds a Constant and an initializer; else_branch a nested If whose branch
  // holds another Constant. A Loop's body arrives through `graphs`.
  onnx::NodeProto* if_node = g->add_node();
  if_node->set_op_type("If");
  if_node->set_name("if0");
  onnx::AttributeProto* then_attr = if_node->add_attribute();
  then_attr->set_name("then_branch");
  then_attr->set_type(onnx::AttributeProto::GRAPH);
  *then_attr->mutable_g()->add_node() = ConstantNode("in_then", RawFloats("", {1}, {42.0f}));
  *then_attr->mutable_g()->add_initializer() = RawFloats("then_init", {1, 1}, {-7.0f});
  onnx::AttributeProto* else_attr = if_node->add_attribute();
  else_attr->set_name("else_branch");
  else_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::NodeProto* inner_if = else_attr->mutable_g()->add_node();
  inner_if->set_op_type("If");
  onnx::AttributeProto* inner_then = inner_if->add_attribute();
  inner_then->set_name("then_branch");
  *inner_then->mutable_g()->add_node() = ConstantNode("deep", TypedInts("", {}, {99}));
  onnx::AttributeProto* bodies = g->add_node()->add_attribute();
  bodies->set_name("bodies");
  *bodies->add_graphs()->add_initializer() = RawFloats("in_graphs", {2}, {1.0f, 2.0f});
  return model;
}

std::string Serialize(const onnx::ModelProto& model) {
  std::string bytes;
  EXPECT_TRUE(model.SerializeToString(&bytes));
  return bytes;
}

absl::Status ParseStatus(const onnx::ModelProto& model) {
  return OnnxConstants::Parse(Serialize(model), "test.onnx").status();
}

TEST(OnnxConstantsTest, ReadsConstantsEverywhereInEveryForm) {
  auto c = OnnxConstants::Parse(Serialize(SampleModel()), "sample.onnx");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ir_version(), 8);
  EXPECT_EQ(c->opset_version(), 16);
  EXPECT_EQ(c->Names(),
            (std::vector<std::string>{"c_float", "c_ints", "c_main", "deep", "flags", "i_raw",
                                      "in_graphs", "in_then", "then_init", "w_raw", "w_typed"}));
  auto w_raw = c->Floats("w_raw", {2, 3});
  ASSERT_TRUE(w_raw.ok()) << w_raw.status();
  EXPECT_EQ(std::vector<float>(w_raw->begin(), w_raw->end()),
            (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto w_typed = c->Floats("w_typed", {4});
  ASSERT_TRUE(w_typed.ok());
  EXPECT_EQ(std::vector<float>(w_typed->begin(), w_typed->end()),
            (std::vector<float>{0.5f, -1.5f, 1e-30f, 3e30f}));
  auto i_raw = c->Ints("i_raw");
  ASSERT_TRUE(i_raw.ok());
  EXPECT_EQ(std::vector<int64_t>(i_raw->begin(), i_raw->end()),
            std::vector<int64_t>{-(int64_t{1} << 40)});
  EXPECT_TRUE((*c->Get("i_raw"))->dims.empty());
  auto c_main = c->Ints("c_main");  // named by the node's output, not the tensor's own name
  ASSERT_TRUE(c_main.ok());
  EXPECT_EQ(std::vector<int64_t>(c_main->begin(), c_main->end()), (std::vector<int64_t>{3, -4}));
  EXPECT_EQ((*c->Floats("c_float", {}))[0], 0.25f);
  EXPECT_EQ((*c->Get("c_ints"))->ints, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ((*c->Floats("in_then", {1}))[0], 42.0f);
  EXPECT_EQ((*c->Floats("then_init", {1, 1}))[0], -7.0f);
  EXPECT_EQ((*c->Ints("deep"))[0], 99);
  EXPECT_EQ((*c->Floats("in_graphs", {2}))[1], 2.0f);
  // Other element types are listed, not decoded.
  auto flags = c->Get("flags");
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ((*flags)->dims, std::vector<int64_t>{2});
  absl::Status s = c->Floats("flags", {2}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "sample.onnx") && Contains(s, "'flags' is bool")) << s;
}

TEST(OnnxConstantsTest, LookupErrorsNameTheTensor) {
  auto c = OnnxConstants::Parse(Serialize(SampleModel()), "sample.onnx");
  ASSERT_TRUE(c.ok());
  absl::Status s = c->Floats("w_raw", {3, 2}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "'w_raw' has shape [2, 3], expected [3, 2]")) << s;
  s = c->Floats("nope", {1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, "sample.onnx: no constant tensor named 'nope'")) << s;
  s = c->Ints("w_raw").status();
  EXPECT_TRUE(Contains(s, "'w_raw' is float32, not int64")) << s;
  s = c->Floats("c_main", {2}).status();
  EXPECT_TRUE(Contains(s, "is int64, not float32")) << s;

  // The same name in two subgraphs: kept once, ambiguous when asked for.
  onnx::ModelProto model = SampleModel();
  *model.mutable_graph()->add_initializer() = RawFloats("in_then", {1}, {1.0f});
  auto dup = OnnxConstants::Parse(Serialize(model), "dup.onnx");
  ASSERT_TRUE(dup.ok()) << dup.status();
  s = dup->Floats("in_then", {1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "'in_then' is defined 2 times")) << s;
}

TEST(OnnxConstantsTest, BadTensorsAreErrorsNamingTheTensor) {
  struct Case {
    std::string name;
    std::function<void(onnx::TensorProto&)> damage;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"short raw_data", [](onnx::TensorProto& t) { t.mutable_raw_data()->pop_back(); },
       "needs 24 bytes of raw_data, has 23"},
      {"long raw_data", [](onnx::TensorProto& t) { t.mutable_raw_data()->append("1234"); },
       "needs 24 bytes of raw_data, has 28"},
      {"wrong dims", [](onnx::TensorProto& t) { t.set_dims(1, 4); },
       "needs 32 bytes of raw_data, has 24"},
      {"negative dim", [](onnx::TensorProto& t) { t.set_dims(0, -2); }, "negative dimension"},
      {"huge dims",
       [](onnx::TensorProto& t) {
         t.set_dims(0, int64_t{1} << 40);
         t.set_dims(1, int64_t{1} << 40);
       },
       "more elements than the file can hold"},
      {"huge rank",
       [](onnx::TensorProto& t) {
         for (int i = 0; i < 20; ++i) t.add_dims(1);
       },
       "has rank 22"},
      {"no type", [](onnx::TensorProto& t) { t.clear_data_type(); }, "has no element type"},
      {"raw and typed", [](onnx::TensorProto& t) { t.add_float_data(1.0f); },
       "has both raw_data and 1 typed values"},
      {"typed count",
       [](onnx::TensorProto& t) {
         t.clear_raw_data();
         t.add_float_data(1.0f);
       },
       "needs 6 values, has 1"},
      {"external", [](onnx::TensorProto& t) { t.set_data_location(onnx::TensorProto::EXTERNAL); },
       "external data file"},
      {"unnamed", [](onnx::TensorProto& t) { t.clear_name(); }, "unnamed tensor"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    onnx::ModelProto model = EmptyModel();
    onnx::TensorProto* t = model.mutable_graph()->add_initializer();
    *t = RawFloats("w", {2, 3}, {1, 2, 3, 4, 5, 6});
    c.damage(*t);
    const absl::Status s = ParseStatus(model);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(Contains(s, "test.onnx: ") && Contains(s, c.expect)) << s;
    if (c.name != "unnamed") {
      EXPECT_TRUE(Contains(s, "tensor 'w' (initializer of the main graph)")) << s;
    }
  }
  // A damaged tensor deep in a subgraph names its place.
  onnx::ModelProto model = SampleModel();
  model.mutable_graph()
      ->mutable_node(3)
      ->mutable_attribute(0)
      ->mutable_g()
      ->mutable_node(0)
      ->mutable_attribute(0)
      ->mutable_t()
      ->mutable_raw_data()
      ->pop_back();
  absl::Status s = ParseStatus(model);
  EXPECT_TRUE(Contains(s,
                       "tensor 'in_then' (node 0 ('in_then_node', Constant) of subgraph "
                       "'then_branch' of node 3 ('if0', If) of the main graph)"))
      << s;
  // A Constant node must have exactly one output.
  model = EmptyModel();
  *model.mutable_graph()->add_node() = ConstantNode("x", RawFloats("", {1}, {1.0f}));
  model.mutable_graph()->mutable_node(0)->add_output("y");
  s = ParseStatus(model);
  EXPECT_TRUE(Contains(s, "has 2 outputs")) << s;
}

TEST(OnnxConstantsTest, NonOnnxInputIsRejected) {
  // Bytes that are not protobuf, protobuf that is not a model, and a model missing its parts.
  for (const std::string& bytes :
       {std::string(), std::string("hello, world\n"),
        std::string("RIFF\x24\x00\x00\x00WAVEfmt ", 16), std::string("\xff\xff\xff\xff", 4)}) {
    const absl::Status s = OnnxConstants::Parse(bytes, "x.onnx").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(Contains(s, "x.onnx: not an ONNX model")) << s;
  }
  onnx::ModelProto model = EmptyModel();
  model.clear_opset_import();
  EXPECT_TRUE(Contains(ParseStatus(model), "imports no ai.onnx operator set"));
  model = EmptyModel();
  model.set_ir_version(1000);
  EXPECT_TRUE(Contains(ParseStatus(model), "not an ONNX model (ir_version 1000)"));
  model = EmptyModel();
  model.clear_graph();
  EXPECT_TRUE(Contains(ParseStatus(model), "not an ONNX model (no graph)"));
}

TEST(OnnxConstantsTest, FileErrorsNameThePath) {
  const fs::path dir = testing::MakeTempDir("waav-onnx");
  absl::Status s = OnnxConstants::Read((dir / "missing.onnx").string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, "missing.onnx")) << s;
  // Oversized: a sparse file just over the limit is refused before it is read.
  const fs::path big = dir / "big.onnx";
  { std::ofstream(big, std::ios::binary) << 'x'; }
  fs::resize_file(big, static_cast<uintmax_t>(OnnxConstants::kMaxFileBytes) + 1);
  s = OnnxConstants::Read(big.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "big.onnx") && Contains(s, "more than")) << s;
  // A real file of another kind.
  if (auto wav = testing::SpeechFile("jfk.wav")) {
    s = OnnxConstants::Read(*wav).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s, "jfk.wav: not an ONNX model")) << s;
  }
  const fs::path good = dir / "good.onnx";
  { std::ofstream(good, std::ios::binary) << Serialize(SampleModel()); }
  auto c = OnnxConstants::Read(good.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->origin(), good.string());
  fs::remove_all(dir);
}

// ---- The Silero VAD files -----------------------------------------------------------------------

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::vector<std::pair<std::string, std::vector<int64_t>>>& SileroWeights() {
  static const auto* weights = new std::vector<std::pair<std::string, std::vector<int64_t>>>{
      {"stft.forward_basis_buffer", {258, 1, 256}},
      {"encoder.0.reparam_conv.weight", {128, 129, 3}},
      {"encoder.0.reparam_conv.bias", {128}},
      {"encoder.1.reparam_conv.weight", {64, 128, 3}},
      {"encoder.1.reparam_conv.bias", {64}},
      {"encoder.2.reparam_conv.weight", {64, 64, 3}},
      {"encoder.2.reparam_conv.bias", {64}},
      {"encoder.3.reparam_conv.weight", {128, 64, 3}},
      {"encoder.3.reparam_conv.bias", {128}},
      {"decoder.rnn.weight_ih", {512, 128}},
      {"decoder.rnn.weight_hh", {512, 128}},
      {"decoder.rnn.bias_ih", {512}},
      {"decoder.rnn.bias_hh", {512}},
      {"decoder.decoder.2.weight", {1, 128, 1}},
      {"decoder.decoder.2.bias", {1}},
  };
  return *weights;
}

// The 16 kHz export keeps the weights as initializers named "model.*"; the two-rate export as
// Constant nodes inside If_0's branches (then: 16 kHz, else: 8 kHz). Same values, bit for bit.
TEST(OnnxConstantsTest, BothSileroExportsHoldTheSameWeights) {
  auto dir = testing::SileroVadDir();
  if (!dir) GTEST_SKIP() << "models/silero-vad absent (run scripts/fetch_vad)";
  auto op15 = OnnxConstants::Read(*dir + "/silero_vad_16k_op15.onnx");
  ASSERT_TRUE(op15.ok()) << op15.status();
  auto both = OnnxConstants::Read(*dir + "/silero_vad.onnx");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(op15->opset_version(), 15);
  for (const auto& [name, dims] : SileroWeights()) {
    SCOPED_TRACE(name);
    auto a = op15->Floats("model." + name, dims);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = both->Floats("If_0_then_branch__Inline_0__" + name, dims);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)), 0);
    for (float v : *a) ASSERT_TRUE(std::isfinite(v));
  }
  // The 8 kHz weights sit in the other branch, with half the STFT size.
  EXPECT_TRUE(
      both->Floats("If_0_else_branch__Inline_0__stft.forward_basis_buffer", {130, 1, 128}).ok());
  // Facts about the graph the model code relies on: hop 128, reflect padding (0, 64).
  auto hop = op15->Ints("self.model.stft.hop_length");
  ASSERT_TRUE(hop.ok()) << hop.status();
  EXPECT_EQ(std::vector<int64_t>(hop->begin(), hop->end()), std::vector<int64_t>{128});
  auto pad = op15->Ints("onnx::Shape_19");
  ASSERT_TRUE(pad.ok()) << pad.status();
  EXPECT_EQ(std::vector<int64_t>(pad->begin(), pad->end()), (std::vector<int64_t>{0, 64}));
}

// Every proper prefix of a real file is rejected with an error naming the file: inside the graph
// a length prefix runs past the end; at the top level the operator set import (written after
// the graph) is missing.
TEST(OnnxConstantsTest, TruncatedSileroFilesAreRejected) {
  auto dir = testing::SileroVadDir();
  if (!dir) GTEST_SKIP() << "models/silero-vad absent (run scripts/fetch_vad)";
  for (const std::string file : {"silero_vad_16k_op15.onnx", "silero_vad.onnx"}) {
    SCOPED_TRACE(file);
    const std::string bytes = ReadFile(*dir + "/" + file);
    ASSERT_GT(bytes.size(), 1000u);
    std::vector<size_t> lengths;
    for (size_t n = 0; n < 300; ++n) lengths.push_back(n);
    for (size_t n = 300; n < bytes.size() - 300; n += 1009) lengths.push_back(n);
    for (size_t n = bytes.size() - 300; n < bytes.size(); ++n) lengths.push_back(n);
    for (size_t n : lengths) {
      const absl::Status s = OnnxConstants::Parse(bytes.substr(0, n), file).status();
      ASSERT_FALSE(s.ok()) << "a prefix of " << n << " bytes was accepted";
      ASSERT_TRUE(Contains(s, file)) << s;
    }
  }
}

// Random byte flips never crash the reader: it either rejects the file with an error naming it,
// or reads it (a flip inside a weight's bytes only changes the value), and then every lookup
// returns a value of the right size or an error.
TEST(OnnxConstantsTest, RandomByteFlipsNeverCrash) {
  auto dir = testing::SileroVadDir();
  std::string original;
  std::string prefix = "model.";
  if (dir) {
    original = ReadFile(*dir + "/silero_vad_16k_op15.onnx");
  } else {
    std::cout << "models/silero-vad absent: flipping bytes of a synthetic model\n";
    original = Serialize(SampleModel());
  }
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes = original;
    const int flips = std::uniform_int_distribution<int>(1, 16)(rng);
    // Every other trial hits the first 16 KiB, where the nodes and the first tensors' headers
    // are (a graph serialises its nodes before its initializers); the rest hit anywhere, mostly
    // weight bytes.
    const size_t span = trial % 2 == 0 ? std::min<size_t>(bytes.size(), 16384) : bytes.size();
    for (int f = 0; f < flips; ++f) {
      const size_t at = std::uniform_int_distribution<size_t>(0, span - 1)(rng);
      bytes[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    auto c = OnnxConstants::Parse(bytes, "flipped.onnx");
    if (!c.ok()) {
      ASSERT_TRUE(Contains(c.status(), "flipped.onnx")) << c.status() << " (seed " << seed << ")";
      ++rejected;
      continue;
    }
    ++accepted;
    for (const auto& [name, dims] : SileroWeights()) {
      auto w = c->Floats(prefix + name, dims);
      if (w.ok()) {
        int64_t numel = 1;
        for (int64_t d : dims) numel *= d;
        ASSERT_EQ(static_cast<int64_t>(w->size()), numel) << "seed " << seed;
      }
    }
  }
  std::cout << "byte flips: " << rejected << " files rejected, " << accepted << " read\n";
}

}  // namespace
}  // namespace waav::vad
