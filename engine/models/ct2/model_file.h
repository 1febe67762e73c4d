// Reader for CTranslate2's `model.bin` (what faster-whisper ships), binary versions 1 to 6.
//
// Layout (little endian; strings are a uint16 length that counts a trailing NUL, then the bytes):
//   uint32 version
//   string spec_name; uint32 spec_revision                       (version >= 2)
//   uint32 n_variables, then per variable:
//     string name; uint8 rank; uint32 dims[rank]
//     uint8 dtype; uint32 n_bytes                                 (version >= 4)
//     uint8 item_size; uint32 n_elements                          (version <= 3: 4 f32, 2 i16, 1
//     i8) n_bytes of row-major data
//   uint32 n_aliases, then per alias: string alias; string target  (version >= 3)
// Version 5 and 6 files are laid out like version 4 (the later versions changed what the writer
// may put in them, not the framing).
//
// The reader is strict where CTranslate2 is lenient: trailing bytes, duplicate names, aliases to
// missing variables and byte counts that disagree with the shape are errors, each naming the
// file and the byte offset or variable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace waav::ct2 {

// dtype codes as stored (CTranslate2's DataType enum order).
enum class VarType : uint8_t { kF32 = 0, kI8 = 1, kI16 = 2, kI32 = 3, kF16 = 4, kBF16 = 5 };

size_t VarTypeSize(VarType type);
const char* VarTypeName(VarType type);  // "f32", "i8", ...

struct Variable {
  std::string name;
  std::vector<int64_t> shape;  // empty for a scalar
  VarType type = VarType::kF32;
  // Raw little-endian elements inside the ModelFile's read-only mapping of the file: valid as
  // long as the ModelFile (or anything it was moved into) lives. No alignment is guaranteed
  // (offsets in the file are arbitrary): copy out, or read with memcpy.
  absl::Span<const uint8_t> bytes;

  const uint8_t* data() const { return bytes.data(); }
  int64_t numel() const;
};

class ModelFile {
 public:
  // Maps `path` read-only and validates the whole structure (not the values). When
  // `expected_spec` is not empty the file's spec name must equal it (e.g. "WhisperSpec").
  // The payload is not copied: pages are read on first touch. Replacing the file by renaming
  // another over it is safe; truncating it in place while mapped is not (SIGBUS on access).
  static absl::StatusOr<ModelFile> Open(const std::string& path,
                                        const std::string& expected_spec = "");

  ModelFile(ModelFile&&) noexcept;
  ModelFile& operator=(ModelFile&&) noexcept;
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;
  ~ModelFile();

  const std::string& path() const { return path_; }
  const std::string& spec_name() const { return spec_name_; }  // "" for version 1
  int spec_revision() const { return spec_revision_; }
  int version() const { return version_; }

  // The variable called `name`, following aliases. NotFound names the file and the variable.
  // Pointers stay valid as long as this ModelFile (or the one it is moved into) lives.
  absl::StatusOr<const Variable*> Get(const std::string& name) const;

  // Get plus checks: exactly `shape`, and a type among `allowed` (InvalidArgument otherwise,
  // naming file, variable, expected and actual).
  absl::StatusOr<const Variable*> GetTensor(const std::string& name,
                                            const std::vector<int64_t>& shape,
                                            absl::Span<const VarType> allowed = kFloatTypes) const;
  // A rank-0 i8/i16/i32 variable (CTranslate2 stores flags and sizes this way), sign-extended.
  absl::StatusOr<int64_t> GetScalarInt(const std::string& name) const;

  // Variable names in file order, then the aliases in file order.
  std::vector<std::string> Names() const;
  // Number of variables, aliases excluded (148 for Whisper tiny.en).
  size_t num_variables() const { return variables_.size(); }

  static constexpr VarType kFloatTypes[] = {VarType::kF32, VarType::kF16, VarType::kBF16};

 private:
  class Mapping;
  friend class ModelFileParser;
  ModelFile() = default;

  std::string path_;
  std::unique_ptr<Mapping> mapping_;  // owns the bytes every Variable::bytes points into
  std::string spec_name_;
  int spec_revision_ = 0;
  int version_ = 0;
  // unique_ptr so that Variable addresses survive moves of the ModelFile and of the vector.
  std::vector<std::unique_ptr<Variable>> variables_;
  std::vector<std::string> aliases_;                         // in file order
  absl::flat_hash_map<std::string, const Variable*> index_;  // names and aliases
};

}  // namespace waav::ct2
