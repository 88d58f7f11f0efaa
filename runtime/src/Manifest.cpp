//===- Manifest.cpp - parse and verify the bundle manifest ----------------===//

#include "Manifest.h"

#include "Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <unordered_map>

using json = nlohmann::json;

namespace kvrt::impl {

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

namespace {
struct DTypeEntry {
  DType dtype;
  const char *name;
};
} // namespace

static constexpr DTypeEntry kDTypes[] = {
    {DType::F32, "f32"},       {DType::F16, "f16"},       {DType::BF16, "bf16"},
    {DType::F8E4M3, "f8e4m3"}, {DType::F8E5M2, "f8e5m2"}, {DType::I8, "i8"},
    {DType::I32, "i32"},       {DType::I64, "i64"},
};

const char *dtypeName(DType dtype) {
  for (const DTypeEntry &entry : kDTypes)
    if (entry.dtype == dtype)
      return entry.name;
  return "?";
}

bool parseDType(std::string_view name, DType *out) {
  for (const DTypeEntry &entry : kDTypes) {
    if (name == entry.name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

size_t dtypeBytes(DType dtype) {
  // A switch, not the table: every tensor of every launch asks.
  switch (dtype) {
  case DType::F8E4M3:
  case DType::F8E5M2:
  case DType::I8:
    return 1;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I64:
    return 8;
  }
  return 0;
}

const char *kindName(KernelKind kind) {
  switch (kind) {
  case KernelKind::Append:
    return "append";
  case KernelKind::SlotMapping:
    return "slot_mapping";
  case KernelKind::FusedAppend:
    return "fused_append";
  }
  return "?";
}

const char *variantName(Variant variant) {
  return variant == Variant::Vector ? "vector" : "scalar";
}

static constexpr std::pair<Layout, const char *> kLayouts[] = {
    {Layout::Contiguous, "contiguous"},
    {Layout::PagedNHD, "paged_nhd"},
    {Layout::PagedHND, "paged_hnd"},
    {Layout::VllmVectorized, "vllm_vectorized"},
    {Layout::DualStacked, "dual_stacked"},
};

const char *layoutName(Layout layout) {
  for (const auto &[value, name] : kLayouts)
    if (value == layout)
      return name;
  return "?";
}

bool CacheDescription::operator==(const CacheDescription &other) const {
  return layout == other.layout && blockSize == other.blockSize &&
         numKvHeads == other.numKvHeads && headDim == other.headDim &&
         x == other.x && dtype == other.dtype;
}

// The stride scalars of append, shared by fused_append (docs/KERNEL-ABI.md).
#define KVRT_APPEND_STRIDES                                                    \
  "key_stride_token", "key_stride_head", "key_stride_dim",                     \
      "value_stride_token", "value_stride_head", "value_stride_dim",           \
      "key_cache_stride_block", "key_cache_stride_head",                       \
      "key_cache_stride_pos", "key_cache_stride_dim",                          \
      "value_cache_stride_block", "value_cache_stride_head",                   \
      "value_cache_stride_pos", "value_cache_stride_dim"

const std::vector<std::string_view> &expectedParams(KernelKind kind) {
  static const std::vector<std::string_view> append = {
      "key",         "value",      "slot_mapping", "key_cache",
      "value_cache", "num_tokens", "num_blocks",   KVRT_APPEND_STRIDES};
  static const std::vector<std::string_view> slotMapping = {
      "block_table",        "query_start_loc",   "context_lens",
      "slot_mapping",       "num_tokens",        "num_reqs",
      "block_table_stride", "max_blocks_per_req"};
  static const std::vector<std::string_view> fusedAppend = {
      "key",
      "value",
      "block_table",
      "query_start_loc",
      "context_lens",
      "key_cache",
      "value_cache",
      "num_tokens",
      "num_blocks",
      "num_reqs",
      "block_table_stride",
      "max_blocks_per_req",
      KVRT_APPEND_STRIDES};
  switch (kind) {
  case KernelKind::Append:
    return append;
  case KernelKind::SlotMapping:
    return slotMapping;
  case KernelKind::FusedAppend:
    break;
  }
  return fusedAppend;
}

#undef KVRT_APPEND_STRIDES

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

bool decodeBase64(std::string_view text, std::vector<unsigned char> *out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  out->clear();
  out->reserve(text.size() / 4 * 3);
  uint32_t accumulator = 0;
  int bits = 0;
  int symbols = 0;
  int padding = 0;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)))
      continue;
    if (c == '=') {
      ++padding;
      ++symbols;
      continue;
    }
    int v = value(c);
    // Data after padding, or a character outside the alphabet.
    if (v < 0 || padding)
      return false;
    accumulator = (accumulator << 6) | static_cast<uint32_t>(v);
    bits += 6;
    ++symbols;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<unsigned char>(accumulator >> bits));
      accumulator &= (1u << bits) - 1;
    }
  }
  return symbols % 4 == 0 && padding <= 2;
}

bool parseChip(std::string_view chip, Target *out) {
  if (chip.substr(0, 3) != "sm_")
    return false;
  std::string_view rest = chip.substr(3);
  size_t digits = 0;
  while (digits < rest.size() &&
         std::isdigit(static_cast<unsigned char>(rest[digits])))
    ++digits;
  if (digits < 2 || digits > 4)
    return false;
  std::string_view suffix = rest.substr(digits);
  if (suffix.size() > 1 ||
      (suffix.size() == 1 && suffix != "a" && suffix != "f"))
    return false;
  int number = 0;
  for (size_t i = 0; i < digits; ++i)
    number = number * 10 + (rest[i] - '0');
  out->major = number / 10;
  out->minor = number % 10;
  out->archSpecific = suffix == "a";
  out->familySpecific = suffix == "f";
  return out->major > 0;
}

static bool isPowerOfTwo(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

// PTX entry names: what cuModuleGetFunction will be asked for.
static bool isIdentifier(const std::string &name) {
  if (name.empty() ||
      !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  });
}

static bool endsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.substr(text.size() - suffix.size()) == suffix;
}

/// A JSON value for a message: a string quoted, anything else by its type.
/// Never dump(): it recurses, and a deeply nested value overflows the stack.
static std::string describeValue(const json &value) {
  if (value.is_string())
    return quote(value.get_ref<const std::string &>());
  return formatString("a JSON %s", value.type_name());
}

namespace {
/// Reads fields of one JSON object; every error names the field by its path
/// in the manifest ("kernels[2].cache.block_size").
class FieldReader {
public:
  FieldReader(const json &object, std::string path)
      : object(&object), path(std::move(path)) {}

  std::string field(const char *key) const {
    return path.empty() ? std::string(key) : path + "." + key;
  }

  bool has(const char *key) const { return object->contains(key); }

  Status getString(const char *key, std::string *out,
                   bool required = true) const {
    auto it = object->find(key);
    if (it == object->end()) {
      if (!required)
        return Status();
      return missing(key);
    }
    if (!it->is_string())
      return wrongType(key, "a string");
    *out = it->get<std::string>();
    return Status();
  }

  Status getInt(const char *key, int64_t *out, bool required = true) const {
    auto it = object->find(key);
    if (it == object->end()) {
      if (!required)
        return Status();
      return missing(key);
    }
    if (!it->is_number_integer())
      return wrongType(key, "an integer");
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s is out of range",
                        field(key).c_str());
    *out = it->get<int64_t>();
    return Status();
  }

  Status getPositive(const char *key, int64_t *out,
                     bool required = true) const {
    bool present = has(key);
    KVRT_RETURN_IF_ERROR(getInt(key, out, required));
    if (present && *out <= 0)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s must be positive, got %lld",
                        field(key).c_str(), static_cast<long long>(*out));
    return Status();
  }

  Status getObject(const char *key, const json **out) const {
    auto it = object->find(key);
    if (it == object->end())
      return missing(key);
    if (!it->is_object())
      return wrongType(key, "an object");
    *out = &*it;
    return Status();
  }

  Status missing(const char *key) const {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is missing (required)", field(key).c_str());
  }

  Status wrongType(const char *key, const char *what) const {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s must be %s",
                      field(key).c_str(), what);
  }

private:
  // A pointer, not a reference, so that a reader can be reassigned.
  const json *object;
  std::string path;
};
} // namespace

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

static Status parseCache(const FieldReader &kernel, const json &object,
                         CacheDescription *out) {
  FieldReader cache(object, kernel.field("cache"));
  auto invalid = [&](const char *key, const char *rule) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s %s",
                      cache.field(key).c_str(), rule);
  };

  std::string layout;
  KVRT_RETURN_IF_ERROR(cache.getString("layout", &layout));
  bool known = false;
  for (const auto &[value, name] : kLayouts) {
    if (layout == name) {
      out->layout = value;
      known = true;
    }
  }
  if (!known)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected contiguous, paged_nhd, "
                      "paged_hnd, vllm_vectorized or dual_stacked",
                      cache.field("layout").c_str(), quote(layout).c_str());

  // Any block size: a power of two only lets the kernel use a shift.
  const char *blockKey =
      out->layout == Layout::Contiguous ? "max_seq_len" : "block_size";
  KVRT_RETURN_IF_ERROR(cache.getPositive(blockKey, &out->blockSize));
  KVRT_RETURN_IF_ERROR(cache.getPositive("num_kv_heads", &out->numKvHeads));
  KVRT_RETURN_IF_ERROR(cache.getPositive("head_dim", &out->headDim));
  auto pastLimit = [&](const char *key, int64_t value, int64_t limit) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %lld, past the limit of %lld (%s, "
                      "docs/CONTRACT.md)",
                      cache.field(key).c_str(), static_cast<long long>(value),
                      static_cast<long long>(limit), key);
  };
  if (out->blockSize > limits::kMaxBlockSize)
    return pastLimit(blockKey, out->blockSize, limits::kMaxBlockSize);
  if (out->headDim > limits::kMaxHeadDim)
    return pastLimit("head_dim", out->headDim, limits::kMaxHeadDim);
  if (out->numKvHeads > limits::kMaxKvHeads)
    return pastLimit("num_kv_heads", out->numKvHeads, limits::kMaxKvHeads);
  // Cannot overflow: both factors are bounded above.
  if (out->numKvHeads * out->headDim > limits::kMaxElementsPerToken)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: num_kv_heads * head_dim is %lld, past the "
                      "limit of %lld elements per token (docs/CONTRACT.md)",
                      kernel.field("cache").c_str(),
                      static_cast<long long>(out->numKvHeads * out->headDim),
                      static_cast<long long>(limits::kMaxElementsPerToken));

  std::string dtype;
  KVRT_RETURN_IF_ERROR(cache.getString("dtype", &dtype));
  if (!parseDType(dtype, &out->dtype) || out->dtype == DType::I32 ||
      out->dtype == DType::I64)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected f32, f16, bf16, f8e4m3, "
                      "f8e5m2 or i8",
                      cache.field("dtype").c_str(), quote(dtype).c_str());

  if (out->layout == Layout::VllmVectorized) {
    KVRT_RETURN_IF_ERROR(cache.getPositive("x", &out->x));
    if (out->headDim % out->x != 0)
      return invalid("x", "must divide head_dim");
  } else {
    out->x = 0;
  }
  return Status();
}

static Status parseParams(const FieldReader &kernel, const json &object,
                          KernelKind kind) {
  std::string path = kernel.field("params");
  if (!object.is_array())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s must be an array of strings", path.c_str());
  const std::vector<std::string_view> &expected = expectedParams(kind);
  size_t common = std::min(expected.size(), object.size());
  for (size_t i = 0; i < common; ++i) {
    const json &entry = object[i];
    if (!entry.is_string())
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s[%zu] must be a string", path.c_str(), i);
    const std::string &name = entry.get_ref<const std::string &>();
    if (name != expected[i])
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s[%zu] is %s but kvrt packs '%.*s' there "
                        "for kind %s",
                        path.c_str(), i, quote(name).c_str(),
                        static_cast<int>(expected[i].size()),
                        expected[i].data(), kindName(kind));
  }
  if (object.size() < expected.size())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s has %zu entries but kvrt packs %zu for kind "
                      "%s (first missing: '%.*s')",
                      path.c_str(), object.size(), expected.size(),
                      kindName(kind),
                      static_cast<int>(expected[object.size()].size()),
                      expected[object.size()].data());
  if (object.size() > expected.size())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s has %zu entries but kvrt packs %zu for kind "
                      "%s (first extra: %s)",
                      path.c_str(), object.size(), expected.size(),
                      kindName(kind),
                      describeValue(object[expected.size()]).c_str());
  return Status();
}

static Status parseKernel(const json &object, size_t index,
                          KernelDescription *out) {
  std::string path = formatString("kernels[%zu]", index);
  if (!object.is_object())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s must be an object",
                      path.c_str());
  FieldReader kernel(object, path);

  KVRT_RETURN_IF_ERROR(kernel.getString("name", &out->name));
  if (!isIdentifier(out->name))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; a kernel name must be a PTX "
                      "identifier",
                      kernel.field("name").c_str(), quote(out->name).c_str());
  // From here on name the kernel too: "kernels[2] ('kv_append')".
  path = formatString("kernels[%zu] (%s)", index, quote(out->name).c_str());
  kernel = FieldReader(object, path);

  std::string kind;
  KVRT_RETURN_IF_ERROR(kernel.getString("kind", &kind));
  if (kind == "append")
    out->kind = KernelKind::Append;
  else if (kind == "slot_mapping")
    out->kind = KernelKind::SlotMapping;
  else if (kind == "fused_append")
    out->kind = KernelKind::FusedAppend;
  else
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected append, slot_mapping or "
                      "fused_append",
                      kernel.field("kind").c_str(), quote(kind).c_str());
  bool appendLike = out->kind != KernelKind::SlotMapping;

  std::string variant;
  KVRT_RETURN_IF_ERROR(kernel.getString("variant", &variant, appendLike));
  if (!appendLike) {
    // The slot_mapping kernel has no vector form and no promise to check.
    if (!variant.empty() && variant != "scalar")
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %s; a slot_mapping kernel is scalar",
                        kernel.field("variant").c_str(),
                        quote(variant).c_str());
    out->variant = Variant::Scalar;
  } else if (variant == "vector") {
    out->variant = Variant::Vector;
  } else if (variant == "scalar") {
    out->variant = Variant::Scalar;
    if (!endsWith(out->name, "_scalar"))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is a scalar variant, so its name must end "
                        "in '_scalar' (<description>_scalar)",
                        kernel.field("name").c_str());
  } else {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is %s; expected vector or scalar",
                      kernel.field("variant").c_str(), quote(variant).c_str());
  }

  if (appendLike) {
    const json *cache = nullptr;
    KVRT_RETURN_IF_ERROR(kernel.getObject("cache", &cache));
    KVRT_RETURN_IF_ERROR(parseCache(kernel, *cache, &out->cache));

    std::string source;
    KVRT_RETURN_IF_ERROR(kernel.getString("source_dtype", &source));
    if (!parseDType(source, &out->sourceDtype) ||
        !(out->sourceDtype == DType::F32 || out->sourceDtype == DType::F16 ||
          out->sourceDtype == DType::BF16))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %s; expected f32, f16 or bf16",
                        kernel.field("source_dtype").c_str(),
                        quote(source).c_str());
    // The contract refuses this cast (range one way, precision the other);
    // a kernel that claims it was not made by a kvgen that keeps it.
    DType cacheType = out->cache.dtype;
    if ((out->sourceDtype == DType::F16 && cacheType == DType::BF16) ||
        (out->sourceDtype == DType::BF16 && cacheType == DType::F16))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s is %s but the cache dtype is %s; the "
                        "kernel contract refuses f16 <-> bf16",
                        kernel.field("source_dtype").c_str(),
                        dtypeName(out->sourceDtype), dtypeName(cacheType));
  }

  bool isVector = out->variant == Variant::Vector;
  out->alignment = 1;
  out->vectorElems = 1;
  KVRT_RETURN_IF_ERROR(
      kernel.getPositive("alignment", &out->alignment, isVector));
  if (!isPowerOfTwo(out->alignment))
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s must be a power of two",
                      kernel.field("alignment").c_str());
  KVRT_RETURN_IF_ERROR(
      kernel.getPositive("vector_elems", &out->vectorElems, isVector));
  int64_t vectorBytes = 0;
  KVRT_RETURN_IF_ERROR(kernel.getPositive("vector_bytes", &vectorBytes,
                                          /*required=*/false));
  if (isVector) {
    // A vector never straddles two heads (or two x-groups).
    int64_t group = out->cache.layout == Layout::VllmVectorized
                        ? out->cache.x
                        : out->cache.headDim;
    if (group % out->vectorElems != 0)
      return KVRT_ERROR(
          KVRT_ERROR_INVALID_BUNDLE, "bundle: %s (%lld) must divide %s (%lld)",
          kernel.field("vector_elems").c_str(),
          static_cast<long long>(out->vectorElems),
          out->cache.layout == Layout::VllmVectorized ? "cache.x"
                                                      : "cache.head_dim",
          static_cast<long long>(group));
  }

  const json *launchObject = nullptr;
  KVRT_RETURN_IF_ERROR(kernel.getObject("launch", &launchObject));
  FieldReader launch(*launchObject, kernel.field("launch"));
  LaunchDescription &geometry = out->launch;
  if (!appendLike && !launch.has("tokens_per_block") && launch.has("threads")) {
    // "one thread per token": threads is tokens_per_block, threads_x is 1.
    KVRT_RETURN_IF_ERROR(
        launch.getPositive("threads", &geometry.tokensPerBlock));
    geometry.threadsX = 1;
  } else {
    KVRT_RETURN_IF_ERROR(launch.getPositive("threads_x", &geometry.threadsX));
    KVRT_RETURN_IF_ERROR(
        launch.getPositive("tokens_per_block", &geometry.tokensPerBlock));
  }
  KVRT_RETURN_IF_ERROR(launch.getPositive(
      "chunks_per_token", &geometry.chunksPerToken, appendLike));
  // CUDA's limit on threads per block; a launch past it always fails.
  constexpr int64_t kThreads = limits::kMaxThreadsPerBlock;
  if (geometry.threadsX > kThreads || geometry.tokensPerBlock > kThreads ||
      geometry.threadsX * geometry.tokensPerBlock > kThreads)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s: threads_x (%lld) * tokens_per_block (%lld) "
                      "exceeds 1024 threads per block",
                      kernel.field("launch").c_str(),
                      static_cast<long long>(geometry.threadsX),
                      static_cast<long long>(geometry.tokensPerBlock));

  auto params = object.find("params");
  if (params == object.end())
    return kernel.missing("params");
  return parseParams(kernel, *params, out->kind);
}

/// Groups the kernels into operations and checks that the two variants of one
/// description agree on everything but their promise and geometry.
static Status groupOperations(Manifest *manifest) {
  std::vector<KernelDescription> &kernels = manifest->kernels;
  // Hash maps keep the load linear in the number of kernels.
  std::unordered_map<std::string_view, size_t> kernelByName;
  kernelByName.reserve(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    auto [it, inserted] = kernelByName.emplace(kernels[i].name, i);
    if (!inserted)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: kernels[%zu].name '%s' repeats "
                        "kernels[%zu].name",
                        i, kernels[i].name.c_str(), it->second);
  }
  std::unordered_map<std::string, size_t> &operationByName =
      manifest->operationByName;
  operationByName.reserve(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelDescription &kernel = kernels[i];
    std::string name = kernel.name;
    if (kernel.kind != KernelKind::SlotMapping &&
        kernel.variant == Variant::Scalar)
      name.resize(name.size() - std::string_view("_scalar").size());
    auto [it, inserted] =
        operationByName.emplace(name, manifest->operations.size());
    if (inserted) {
      Operation operation;
      operation.name = name;
      operation.kind = kernel.kind;
      manifest->operations.push_back(operation);
    }
    Operation &operation = manifest->operations[it->second];
    int &slot = kernel.variant == Variant::Vector ? operation.vectorKernel
                                                  : operation.scalarKernel;
    int other = kernel.variant == Variant::Vector ? operation.scalarKernel
                                                  : operation.vectorKernel;
    if (slot >= 0 || operation.kind != kernel.kind)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: kernels[%zu] ('%s') clashes with kernel '%s' "
                        "(same description '%s')",
                        i, kernel.name.c_str(),
                        kernels[slot >= 0 ? slot : other].name.c_str(),
                        name.c_str());
    slot = static_cast<int>(i);
    if (other >= 0 && kernel.kind != KernelKind::SlotMapping) {
      const KernelDescription &sibling = kernels[other];
      if (!(sibling.cache == kernel.cache) ||
          sibling.sourceDtype != kernel.sourceDtype)
        return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                          "bundle: kernels[%zu] ('%s') and its other variant "
                          "'%s' describe different caches or source dtypes",
                          i, kernel.name.c_str(), sibling.name.c_str());
    }
  }
  return Status();
}

static Status parseTop(const json &root, Manifest *out) {
  if (!root.is_object())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: the manifest must be a JSON object");
  FieldReader top(root, "");

  std::string format;
  KVRT_RETURN_IF_ERROR(top.getString("format", &format));
  if (format != "kvgen-bundle")
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: format is %s; expected 'kvgen-bundle'",
                      quote(format).c_str());
  int64_t version = 0;
  KVRT_RETURN_IF_ERROR(top.getInt("version", &version));
  if (version != 1)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: version is %lld; this kvrt reads version 1",
                      static_cast<long long>(version));
  out->version = static_cast<int>(version);

  out->hasPtx = top.has("ptx");
  KVRT_RETURN_IF_ERROR(top.getString("ptx", &out->ptx, /*required=*/false));
  if (out->hasPtx && out->ptx.empty())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: ptx is empty");

  out->hasCubin = top.has("cubin_base64");
  if (out->hasCubin) {
    std::string encoded;
    KVRT_RETURN_IF_ERROR(top.getString("cubin_base64", &encoded));
    if (!decodeBase64(encoded, &out->cubin) || out->cubin.empty())
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: cubin_base64 is not valid base64");
  }

  // A host-only bundle (no device code) needs no target.
  if (top.has("target") || out->hasPtx || out->hasCubin) {
    const json *targetObject = nullptr;
    KVRT_RETURN_IF_ERROR(top.getObject("target", &targetObject));
    FieldReader target(*targetObject, "target");
    KVRT_RETURN_IF_ERROR(target.getString("chip", &out->target.chip));
    if (!parseChip(out->target.chip, &out->target))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: target.chip is %s; expected sm_<NN> (e.g. "
                        "sm_90, sm_90a)",
                        quote(out->target.chip).c_str());
    KVRT_RETURN_IF_ERROR(target.getString("features", &out->target.features,
                                          /*required=*/false));
  }

  auto kernels = root.find("kernels");
  if (kernels == root.end())
    return top.missing("kernels");
  if (!kernels->is_array() || kernels->empty())
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: kernels must be a non-empty array");
  out->kernels.resize(kernels->size());
  for (size_t i = 0; i < kernels->size(); ++i)
    KVRT_RETURN_IF_ERROR(parseKernel((*kernels)[i], i, &out->kernels[i]));
  return groupOperations(out);
}

Status parseManifest(const char *data, size_t size, Manifest *out) {
  // An embedded bundle (kvgen --emit=header) may count its terminating NUL.
  while (size > 0 && data[size - 1] == '\0')
    --size;
  *out = Manifest();
  try {
    json root = json::parse(data, data + size);
    return parseTop(root, out);
  } catch (const json::exception &error) {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: not valid JSON: %s",
                      error.what());
  }
}

} // namespace kvrt::impl
