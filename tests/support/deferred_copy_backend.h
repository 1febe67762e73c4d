// A Backend over another (tests: the CPU backend) whose CopyToHostAsync copies as late as its
// contract allows: when the copy's ticket, or a later one, is waited for (WaitForCopy), reading
// the source then, as a copy stream that has not run yet would. It also counts the calls that
// write the source of a copy still pending (ArgmaxLogSumExp's out, FeedChoices' inputs,
// CopyFromHost's and Copy's dst), which the contract forbids: so a caller that reads a
// download before waiting for it, or writes what is being downloaded, fails a test on the CPU
// as it would race on a GPU. Everything else is the inner backend's.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/host_buffer.h"

namespace waav::testing {

class DeferredCopyBackend final : public Backend {
 public:
  explicit DeferredCopyBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // Copies issued and not yet made; calls that wrote a pending copy's source.
  size_t pending() const { return pending_.size(); }
  int violations() const { return violations_; }

  std::string_view name() const override { return "deferred-copy"; }
  DeviceKind device() const override { return inner_->device(); }
  std::string Describe() const override {
    return absl::StrCat(inner_->Describe(), ", downloads made at their wait");
  }

  absl::StatusOr<uint64_t> CopyToHostAsync(const Tensor& src, const HostBuffer& dst,
                                           size_t dst_offset = 0) override {
    if (dst.data() == nullptr || dst_offset > dst.size_bytes() ||
        src.size_bytes() > dst.size_bytes() - dst_offset) {
      return absl::InvalidArgumentError("CopyToHostAsync: the host buffer is too small");
    }
    pending_.push_back({src, static_cast<char*>(dst.data()) + dst_offset, ++issued_});
    return issued_;
  }
  absl::Status WaitForCopy(uint64_t ticket) override {
    if (ticket == 0 || ticket > issued_) {
      return absl::InvalidArgumentError(absl::StrCat("WaitForCopy: ticket ", ticket));
    }
    while (!pending_.empty() && pending_.front().ticket <= ticket) {
      const Pending& p = pending_.front();
      if (absl::Status s = inner_->CopyToHost(p.src, p.dst, p.src.size_bytes()); !s.ok()) return s;
      pending_.pop_front();
    }
    return absl::OkStatus();
  }
  // Kernels finish; downloads stay pending (a copy stream's are not part of it either).
  absl::Status Synchronize() override { return inner_->Synchronize(); }

  absl::Status CopyFromHost(const void* src, size_t bytes, const Tensor& dst) override {
    Written(dst);
    return inner_->CopyFromHost(src, bytes, dst);
  }
  absl::Status Copy(const Tensor& src, const Tensor& dst) override {
    Written(dst);
    return inner_->Copy(src, dst);
  }
  absl::Status ArgmaxLogSumExp(const Tensor& logits, const Tensor& masks, const Tensor& mask_index,
                               const Tensor& out) override {
    Written(out);
    return inner_->ArgmaxLogSumExp(logits, masks, mask_index, out);
  }
  absl::Status FeedChoices(const Tensor& choices, const Tensor& mask_index, int32_t max_position,
                           const Tensor& tokens, const Tensor& positions,
                           const Tensor& lengths) override {
    for (const Tensor* t : {&tokens, &positions, &lengths}) Written(*t);
    return inner_->FeedChoices(choices, mask_index, max_position, tokens, positions, lengths);
  }

  bool supports(Op op) const override { return inner_->supports(op); }
  absl::StatusOr<Tensor> Allocate(const Shape& shape, DType dtype) override {
    return inner_->Allocate(shape, dtype);
  }
  absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) override {
    return inner_->AllocateHost(bytes);
  }
  absl::Status CopyFromHostAsync(const HostBuffer& src, size_t bytes, const Tensor& dst,
                                 size_t src_offset) override {
    return inner_->CopyFromHostAsync(src, bytes, dst, src_offset);
  }
  absl::Status CopyToHost(const Tensor& src, void* dst, size_t bytes) override {
    return inner_->CopyToHost(src, dst, bytes);
  }
  absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor* bias, Activation act,
                      const Tensor& y) override {
    return inner_->Linear(x, weight, bias, act, y);
  }
  absl::Status Conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride,
                      int padding, Activation act, const Tensor& y) override {
    return inner_->Conv1d(x, weight, bias, stride, padding, act, y);
  }
  absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         const Tensor& y) override {
    return inner_->LayerNorm(x, gamma, beta, eps, y);
  }
  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& y) override {
    return inner_->Add(a, b, y);
  }
  absl::Status Gelu(const Tensor& x, const Tensor& y) override { return inner_->Gelu(x, y); }
  absl::Status Attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor* kv_lengths, int num_heads, float scale, bool causal,
                         const Tensor& out) override {
    return inner_->Attention(q, k, v, kv_lengths, num_heads, scale, causal, out);
  }
  absl::Status WriteRows(const Tensor& src, const Tensor& positions, const Tensor& dst) override {
    return inner_->WriteRows(src, positions, dst);
  }
  absl::Status GatherRows(const Tensor& src, absl::Span<const int64_t> rows,
                          const Tensor& dst) override {
    return inner_->GatherRows(src, rows, dst);
  }
  absl::Status Embed(const Tensor& tokens, const Tensor& start_positions, const Tensor& token_table,
                     const Tensor& position_table, const Tensor& y) override {
    return inner_->Embed(tokens, start_positions, token_table, position_table, y);
  }
  absl::Status LogSoftmax(const Tensor& x, const Tensor& y) override {
    return inner_->LogSoftmax(x, y);
  }
  absl::Status Activate(const Tensor& x, Activation act, const Tensor& y) override {
    return inner_->Activate(x, act, y);
  }
  absl::Status ComplexMagnitude(const Tensor& x, const Tensor& y) override {
    return inner_->ComplexMagnitude(x, y);
  }
  absl::Status LstmCell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& weight,
                        const Tensor& bias, const Tensor& h_out, const Tensor& c_out) override {
    return inner_->LstmCell(x, h, c, weight, bias, h_out, c_out);
  }
  absl::Status LinearResidual(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              Activation act, const Tensor& residual, const Tensor& y) override {
    return inner_->LinearResidual(x, weight, bias, act, residual, y);
  }
  absl::StatusOr<std::unique_ptr<PreparedDecoderStep>> PrepareDecoderStep(
      const DecoderStepWeights& weights) override {
    return inner_->PrepareDecoderStep(weights);
  }
  absl::Status LinearPlanes(const Tensor& x, const Tensor& weight, const Tensor* bias,
                            absl::Span<const Tensor> planes) override {
    return inner_->LinearPlanes(x, weight, bias, planes);
  }
  absl::Status LinearPlanesAppend(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                  absl::Span<const Tensor> planes, int first_appended,
                                  const Tensor& positions) override {
    return inner_->LinearPlanesAppend(x, weight, bias, planes, first_appended, positions);
  }
  absl::Status SharedKvAttention(const Tensor& q, const Tensor& kv, const Tensor* kv_scales,
                                 int num_heads, float scale, const Tensor& out) override {
    return inner_->SharedKvAttention(q, kv, kv_scales, num_heads, scale, out);
  }
  absl::Status QuantizeChannels(const Tensor& x, const Tensor& q, const Tensor& scales) override {
    return inner_->QuantizeChannels(x, q, scales);
  }
  absl::Status HeadScores(const Tensor& q, const Tensor& k, int head_dim, float scale,
                          absl::Span<const HeadScoresItem> items, const Tensor& out) override {
    return inner_->HeadScores(q, k, head_dim, scale, items, out);
  }
  void SetLaunchHint(LaunchHint hint) override { inner_->SetLaunchHint(hint); }
  absl::Status BeginCapture() override { return inner_->BeginCapture(); }
  absl::StatusOr<std::unique_ptr<Graph>> EndCapture() override { return inner_->EndCapture(); }
  BackendStats stats() const override { return inner_->stats(); }

 private:
  struct Pending {
    Tensor src;
    void* dst;
    uint64_t ticket;
  };
  void Written(const Tensor& t) {
    if (!t.defined()) return;
    const char* begin = static_cast<const char*>(t.data());
    const char* end = begin + t.size_bytes();
    for (const Pending& p : pending_) {
      const char* s = static_cast<const char*>(p.src.data());
      if (begin < s + p.src.size_bytes() && s < end) ++violations_;
    }
  }

  std::unique_ptr<Backend> inner_;
  std::deque<Pending> pending_;
  uint64_t issued_ = 0;
  int violations_ = 0;
};

}  // namespace waav::testing
