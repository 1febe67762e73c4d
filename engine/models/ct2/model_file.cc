#include "engine/models/ct2/model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/runtime/status.h"

namespace waav::ct2 {
namespace {

constexpr uint32_t kMinVersion = 1;
constexpr uint32_t kMaxVersion = 6;
constexpr int kMaxRank = 8;
// Smallest possible encodings, used to reject counts the remaining bytes cannot hold before
// reserving memory for them: a variable is a 1-character name (2 + 2 bytes), rank, dtype,
// n_bytes; an alias is two 1-character strings.
constexpr uint64_t kMinVariableBytes = 4 + 1 + 1 + 4;
constexpr uint64_t kMinAliasBytes = 4 + 4;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

size_t VarTypeSize(VarType type) {
  switch (type) {
    case VarType::kF32:
      return 4;
    case VarType::kI8:
      return 1;
    case VarType::kI16:
      return 2;
    case VarType::kI32:
      return 4;
    case VarType::kF16:
      return 2;
    case VarType::kBF16:
      return 2;
  }
  return 0;
}

const char* VarTypeName(VarType type) {
  switch (type) {
    case VarType::kF32:
      return "f32";
    case VarType::kI8:
      return "i8";
    case VarType::kI16:
      return "i16";
    case VarType::kI32:
      return "i32";
    case VarType::kF16:
      return "f16";
    case VarType::kBF16:
      return "bf16";
  }
  return "?";
}

int64_t Variable::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// A read-only private mapping of a whole file.
class ModelFile::Mapping {
 public:
  static absl::StatusOr<std::unique_ptr<Mapping>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const std::string why = absl::StrCat(path, ": cannot open: ", std::strerror(err));
      return err == ENOENT ? absl::NotFoundError(why) : absl::InvalidArgumentError(why);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    }
    if (st.st_size == 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, ": empty file"));
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps its own reference to the file
    if (addr == MAP_FAILED) {
      return absl::DataLossError(absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    return std::unique_ptr<Mapping>(new Mapping(static_cast<const uint8_t*>(addr), size));
  }

  ~Mapping() { ::munmap(const_cast<uint8_t*>(data_), size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Mapping(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

ModelFile::ModelFile(ModelFile&&) noexcept = default;
ModelFile& ModelFile::operator=(ModelFile&&) noexcept = default;
ModelFile::~ModelFile() = default;

// Walks the mapped bytes once, checking every read against the end of the file.
class ModelFileParser {
 public:
  ModelFileParser(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  absl::Status Parse(ModelFile* out) {
    ASSIGN_OR_RETURN(const uint32_t version, U32("binary version"));
    if (version < kMinVersion || version > kMaxVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": unsupported CTranslate2 binary version ", version,
                       " (this reader supports ", kMinVersion, " to ", kMaxVersion, ")"));
    }
    out->version_ = static_cast<int>(version);
    out->spec_revision_ = 1;
    if (version >= 2) {
      ASSIGN_OR_RETURN(out->spec_name_, String("spec name"));
      ASSIGN_OR_RETURN(const uint32_t revision, U32("spec revision"));
      if (revision > 1'000'000) return Corrupt(absl::StrCat("absurd spec revision ", revision));
      out->spec_revision_ = static_cast<int>(revision);
    }

    const size_t count_at = pos_;
    ASSIGN_OR_RETURN(const uint32_t n_vars, U32("variable count"));
    if (n_vars > Remaining() / kMinVariableBytes) {
      return CorruptAt(count_at, absl::StrCat("variable count ", n_vars, " cannot fit in the ",
                                              Remaining(), " bytes left"));
    }
    out->variables_.reserve(n_vars);
    out->index_.reserve(n_vars);
    for (uint32_t i = 0; i < n_vars; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<Variable> var, ParseVariable(version, i));
      if (out->index_.contains(var->name)) {
        return Corrupt(absl::StrCat("variable #", i, " '", var->name, "' is a duplicate name"));
      }
      out->index_.emplace(var->name, var.get());
      out->variables_.push_back(std::move(var));
    }

    if (version >= 3) {
      const size_t aliases_at = pos_;
      ASSIGN_OR_RETURN(const uint32_t n_aliases, U32("alias count"));
      if (n_aliases > Remaining() / kMinAliasBytes) {
        return CorruptAt(aliases_at, absl::StrCat("alias count ", n_aliases, " cannot fit in the ",
                                                  Remaining(), " bytes left"));
      }
      for (uint32_t i = 0; i < n_aliases; ++i) {
        const std::string what = absl::StrCat("alias #", i);
        ASSIGN_OR_RETURN(std::string alias, String(what + " name"));
        ASSIGN_OR_RETURN(const std::string target, String(what + " target"));
        auto it = out->index_.find(target);
        if (it == out->index_.end()) {
          return Corrupt(
              absl::StrCat(what, " '", alias, "' points to missing variable '", target, "'"));
        }
        if (out->index_.contains(alias)) {
          return Corrupt(absl::StrCat(what, " '", alias, "' repeats an existing name"));
        }
        const Variable* v = it->second;
        out->index_.emplace(alias, v);
        out->aliases_.push_back(std::move(alias));
      }
    }
    if (pos_ != size_) {
      return Corrupt(absl::StrCat(Remaining(), " unexpected trailing bytes after the ",
                                  version >= 3 ? "aliases" : "variables"));
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::unique_ptr<Variable>> ParseVariable(uint32_t version, uint32_t i) {
    auto var = std::make_unique<Variable>();
    ASSIGN_OR_RETURN(var->name, String(absl::StrCat("name of variable #", i)));
    const std::string what = absl::StrCat("variable #", i, " '", var->name, "'");
    const size_t rank_at = pos_;
    ASSIGN_OR_RETURN(const uint8_t rank, U8(what + " rank"));
    if (rank > kMaxRank) {
      return CorruptAt(
          rank_at, absl::StrCat(what, " has rank ", rank, " (at most ", kMaxRank, " supported)"));
    }
    // An element count above the file size can never be backed by payload, so the product is
    // saturated there instead of being allowed to overflow.
    const int64_t too_many = static_cast<int64_t>(size_) + 1;
    int64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      ASSIGN_OR_RETURN(const uint32_t dim, U32(absl::StrCat(what, " dimension ", d)));
      var->shape.push_back(dim);
      numel = (dim != 0 && numel > too_many / dim) ? too_many : numel * dim;
    }

    const size_t type_at = pos_;
    uint64_t n_bytes = 0;
    if (version >= 4) {
      ASSIGN_OR_RETURN(const uint8_t code, U8(what + " dtype"));
      if (code > static_cast<uint8_t>(VarType::kBF16)) {
        return CorruptAt(type_at, absl::StrCat(what, " has unknown dtype code ", code));
      }
      var->type = static_cast<VarType>(code);
      ASSIGN_OR_RETURN(const uint32_t nb, U32(what + " byte count"));
      n_bytes = nb;
    } else {
      // Before version 4 only the item size was stored; CTranslate2 reads 4/2/1 as f32/i16/i8.
      ASSIGN_OR_RETURN(const uint8_t item_size, U8(what + " item size"));
      switch (item_size) {
        case 4:
          var->type = VarType::kF32;
          break;
        case 2:
          var->type = VarType::kI16;
          break;
        case 1:
          var->type = VarType::kI8;
          break;
        default:
          return CorruptAt(type_at, absl::StrCat(what, " has unknown item size ", item_size));
      }
      ASSIGN_OR_RETURN(const uint32_t n_items, U32(what + " element count"));
      n_bytes = uint64_t{n_items} * item_size;
    }
    const uint64_t expected = static_cast<uint64_t>(numel) * VarTypeSize(var->type);
    if (numel > static_cast<int64_t>(size_) || n_bytes != expected) {
      return CorruptAt(type_at,
                       absl::StrCat(what, " ", VarTypeName(var->type), ShapeString(var->shape),
                                    " stores ", n_bytes, " bytes; its shape needs ", expected));
    }
    if (n_bytes > Remaining()) {
      return Truncated(absl::StrCat(what, " payload"), n_bytes);
    }
    var->bytes = absl::Span<const uint8_t>(data_ + pos_, static_cast<size_t>(n_bytes));
    pos_ += static_cast<size_t>(n_bytes);
    return var;
  }

  size_t Remaining() const { return size_ - pos_; }

  absl::Status Truncated(const std::string& what, uint64_t need) const {
    return absl::DataLossError(absl::StrCat(path_, ": truncated at byte ", pos_, ": ", what,
                                            " needs ", need, " bytes, ", Remaining(), " left"));
  }
  absl::Status CorruptAt(size_t offset, const std::string& what) const {
    return absl::DataLossError(absl::StrCat(path_, ": corrupt at byte ", offset, ": ", what));
  }
  absl::Status Corrupt(const std::string& what) const { return CorruptAt(pos_, what); }

  absl::StatusOr<uint8_t> U8(const std::string& what) {
    if (Remaining() < 1) return Truncated(what, 1);
    return data_[pos_++];
  }
  absl::StatusOr<uint16_t> U16(const std::string& what) {
    if (Remaining() < 2) return Truncated(what, 2);
    const uint16_t v = static_cast<uint16_t>(data_[pos_] | (data_[pos_ + 1] << 8));
    pos_ += 2;
    return v;
  }
  absl::StatusOr<uint32_t> U32(const std::string& what) {
    if (Remaining() < 4) return Truncated(what, 4);
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = (v << 8) | data_[pos_ + static_cast<size_t>(k)];
    pos_ += 4;
    return v;
  }
  // A uint16 length that includes a trailing NUL, then the bytes. No embedded NULs.
  absl::StatusOr<std::string> String(const std::string& what) {
    const size_t at = pos_;
    ASSIGN_OR_RETURN(const uint16_t length, U16(what + " length"));
    if (length == 0) return CorruptAt(at, what + " has length 0 (no NUL terminator)");
    if (Remaining() < length) return Truncated(what, length);
    const char* chars = reinterpret_cast<const char*>(data_ + pos_);
    if (chars[length - 1] != '\0') return CorruptAt(at, what + " is not NUL-terminated");
    std::string s(chars, length - 1u);
    if (s.find('\0') != std::string::npos) return CorruptAt(at, what + " contains a NUL byte");
    pos_ += length;
    return s;
  }

  const std::string& path_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

absl::StatusOr<ModelFile> ModelFile::Open(const std::string& path,
                                          const std::string& expected_spec) {
  ModelFile file;
  file.path_ = path;
  ASSIGN_OR_RETURN(file.mapping_, Mapping::Open(path));
  ModelFileParser parser(path, file.mapping_->data(), file.mapping_->size());
  RETURN_IF_ERROR(parser.Parse(&file));
  if (!expected_spec.empty() && file.spec_name_ != expected_spec) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model spec is '", file.spec_name_,
                                                   "', expected '", expected_spec, "'"));
  }
  return file;
}

absl::StatusOr<const Variable*> ModelFile::Get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no variable '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<const Variable*> ModelFile::GetTensor(const std::string& name,
                                                     const std::vector<int64_t>& shape,
                                                     absl::Span<const VarType> allowed) const {
  ASSIGN_OR_RETURN(const Variable* v, Get(name));
  bool type_ok = false;
  for (const VarType t : allowed) type_ok = type_ok || t == v->type;
  if (v->shape != shape || !type_ok) {
    std::vector<std::string> names;
    for (const VarType t : allowed) names.push_back(VarTypeName(t));
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": variable '", name, "' is ", VarTypeName(v->type), ShapeString(v->shape),
        ", expected ", absl::StrJoin(names, "|"), ShapeString(shape)));
  }
  return v;
}

absl::StatusOr<int64_t> ModelFile::GetScalarInt(const std::string& name) const {
  ASSIGN_OR_RETURN(const Variable* v, Get(name));
  if (!v->shape.empty() ||
      (v->type != VarType::kI8 && v->type != VarType::kI16 && v->type != VarType::kI32)) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": variable '", name, "' is ",
                                                   VarTypeName(v->type), ShapeString(v->shape),
                                                   ", expected an integer scalar"));
  }
  const uint8_t* b = v->bytes.data();
  switch (v->type) {
    case VarType::kI8:
      return static_cast<int8_t>(b[0]);
    case VarType::kI16:
      return static_cast<int16_t>(b[0] | (b[1] << 8));
    default:
      return static_cast<int32_t>(uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) |
                                  (uint32_t{b[3]} << 24));
  }
}

std::vector<std::string> ModelFile::Names() const {
  std::vector<std::string> names;
  names.reserve(variables_.size() + aliases_.size());
  for (const auto& v : variables_) names.push_back(v->name);
  for (const auto& a : aliases_) names.push_back(a);
  return names;
}

}  // namespace waav::ct2
