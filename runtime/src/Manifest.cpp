//===- Manifest.cpp - parse and verify the bundle manifest ----------------===//
//
// The top level (format, version, target, code) and the grouping of kernels
// into descriptions; each kernel is parsed in ManifestKernel.cpp.
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"

#include "FieldReader.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace kvrt::impl {

Status parseKernel(const json &object, size_t index, KernelDescription *out);

bool CacheDescription::operator==(const CacheDescription &other) const {
  return layout == other.layout && blockSize == other.blockSize &&
         numKvHeads == other.numKvHeads && headDim == other.headDim &&
         valueDim() == other.valueDim() && x == other.x &&
         dtype == other.dtype && quantized == other.quantized &&
         (!quantized || quant == other.quant) && kOnly == other.kOnly &&
         latent == other.latent && kvLoraRank == other.kvLoraRank &&
         ropeDim == other.ropeDim && inlineScales == other.inlineScales &&
         groupSize == other.groupSize && ropeDtype == other.ropeDtype &&
         entryBytes == other.entryBytes && nvfp4 == other.nvfp4 &&
         nvfp4RowBytes == other.nvfp4RowBytes &&
         nvfp4KScales == other.nvfp4KScales &&
         nvfp4VScales == other.nvfp4VScales && nvfp4Search == other.nvfp4Search;
}

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
      return KVRT_BUNDLE_ERROR("kernels[%zu].name '%s' repeats "
                               "kernels[%zu].name",
                               i, kernels[i].name.c_str(), it->second);
  }
  std::unordered_map<std::string, size_t> &operationByName =
      manifest->operationByName;
  operationByName.reserve(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelDescription &kernel = kernels[i];
    std::string name = kernel.name;
    if (touchesCache(kernel.kind))
      name.resize(name.size() -
                  std::string_view(abi::variantSuffix(kernel.variant)).size());
    auto [it, inserted] =
        operationByName.emplace(name, manifest->operations.size());
    if (inserted) {
      Operation operation;
      operation.name = name;
      operation.kind = kernel.kind;
      manifest->operations.push_back(operation);
    }
    Operation &operation = manifest->operations[it->second];
    int &slot = operation.kernels[static_cast<int>(kernel.variant)];
    // The first kernel of this description, to name in a clash.
    int first = -1;
    for (int index : operation.kernels)
      if (index >= 0 && (first < 0 || index < first))
        first = index;
    if (slot >= 0 || operation.kind != kernel.kind)
      return KVRT_BUNDLE_ERROR("kernels[%zu] ('%s') clashes with kernel '%s' "
                               "(same description '%s')",
                               i, kernel.name.c_str(),
                               kernels[slot >= 0 ? slot : first].name.c_str(),
                               name.c_str());
    slot = static_cast<int>(i);
    if (first >= 0 && touchesCache(kernel.kind)) {
      const KernelDescription &sibling = kernels[first];
      if (!(sibling.cache == kernel.cache) ||
          sibling.sourceDtype != kernel.sourceDtype ||
          sibling.outputDtype != kernel.outputDtype ||
          !(sibling.prologue == kernel.prologue))
        return KVRT_BUNDLE_ERROR(
            "kernels[%zu] ('%s') and its other variant "
            "'%s' describe different caches, source/output "
            "dtypes or prologues",
            i, kernel.name.c_str(), sibling.name.c_str());
    }
    // One promise check serves the vector and wide variants: they must
    // make the same one.
    int vectorKernel = operation.kernelOf(Variant::Vector);
    int wideKernel = operation.kernelOf(Variant::Wide);
    if (vectorKernel >= 0 && wideKernel >= 0) {
      const KernelDescription &vector = kernels[vectorKernel];
      const KernelDescription &wide = kernels[wideKernel];
      if (vector.alignment != wide.alignment ||
          vector.vectorElems != wide.vectorElems)
        return KVRT_BUNDLE_ERROR(
            "the wide kernel '%s' promises alignment %lld "
            "and vector_elems %lld, the vector kernel '%s' %lld "
            "and %lld; they must agree",
            wide.name.c_str(), static_cast<long long>(wide.alignment),
            static_cast<long long>(wide.vectorElems), vector.name.c_str(),
            static_cast<long long>(vector.alignment),
            static_cast<long long>(vector.vectorElems));
    }
  }
  return Status();
}

static Status parseTop(const json &root, Manifest *out) {
  if (!root.is_object())
    return KVRT_BUNDLE_ERROR("the manifest must be a JSON object");
  FieldReader top(root, "", schema::Object::root);
  // The format and version first: another format's keys are not ours.
  for (const char *name : {key::root::format, key::root::version})
    KVRT_RETURN_IF_ERROR(
        top.checkField(*schema::findField(schema::Object::root, name)));
  std::string format = top.getString(key::root::format);
  if (format != "kvgen-bundle")
    return KVRT_BUNDLE_ERROR("format is %s; expected 'kvgen-bundle'",
                             quote(format).c_str());
  int64_t version = top.getInt(key::root::version);
  if (version != abi::kBundleVersion)
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle version %lld is not supported by this kvrt (it "
                      "reads version %d); regenerate the bundle with this "
                      "kvgen",
                      static_cast<long long>(version), abi::kBundleVersion);
  out->version = static_cast<int>(version);
  KVRT_RETURN_IF_ERROR(top.check());

  out->hasPtx = top.has(key::root::ptx);
  out->ptx = top.getString(key::root::ptx);
  if (out->hasPtx && out->ptx.empty())
    return KVRT_BUNDLE_ERROR("ptx is empty");

  out->hasCubin = top.has(key::root::cubin_base64);
  if (out->hasCubin &&
      (!decodeBase64(top.getString(key::root::cubin_base64), &out->cubin) ||
       out->cubin.empty()))
    return KVRT_BUNDLE_ERROR("cubin_base64 is not valid base64");

  // A host-only bundle (no device code) needs no target.
  if (top.has(key::root::target) || out->hasPtx || out->hasCubin) {
    FieldReader target = top;
    KVRT_RETURN_IF_ERROR(top.getObject(key::root::target, &target));
    out->target.chip = target.getString(key::target::chip);
    if (!parseChip(out->target.chip, &out->target))
      return KVRT_BUNDLE_ERROR("target.chip is %s; expected sm_<NN> (e.g. "
                               "sm_90, sm_90a)",
                               quote(out->target.chip).c_str());
    out->target.features = target.getString(key::target::features);
  }

  const json &kernels = root.at(key::root::kernels);
  if (!kernels.is_array() || kernels.empty())
    return KVRT_BUNDLE_ERROR("kernels must be a non-empty array");
  out->kernels.resize(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i)
    KVRT_RETURN_IF_ERROR(parseKernel(kernels[i], i, &out->kernels[i]));
  return groupOperations(out);
}

namespace {

/// Finds the first key repeated within one object, and the path to that
/// object, in one pass of nlohmann's SAX parser that builds nothing: JSON
/// leaves a repeated key's meaning open and the DOM parser would keep the
/// last one silently, so two tools could read one bundle two ways. (A
/// parser callback could check while the DOM is built, but nlohmann's
/// callback parser is much slower than the plain one.)
class RepeatedKeyFinder : public nlohmann::json_sax<json> {
public:
  /// Where the repeated key is ("" for the top level), and which.
  std::string repeatedObject, repeatedKey;

  bool null() override { return element(); }
  bool boolean(bool) override { return element(); }
  bool number_integer(number_integer_t) override { return element(); }
  bool number_unsigned(number_unsigned_t) override { return element(); }
  bool number_float(number_float_t, const string_t &) override {
    return element();
  }
  bool string(string_t &) override { return element(); }
  bool binary(binary_t &) override { return element(); }
  bool start_object(std::size_t) override {
    element();
    frames.push_back({false, -1, {}, {}});
    return true;
  }
  bool key(string_t &name) override {
    Frame &frame = frames.back();
    if (!frame.keys.insert(name).second) {
      repeatedObject = path();
      repeatedKey = name;
      return false;
    }
    frame.key = name;
    return true;
  }
  bool end_object() override {
    frames.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    element();
    frames.push_back({true, -1, {}, {}});
    return true;
  }
  bool end_array() override {
    frames.pop_back();
    return true;
  }
  /// The DOM parser reports syntax errors, with their position.
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &) override {
    return false;
  }

private:
  struct Frame {
    bool array;
    int64_t index;
    std::string key;
    std::unordered_set<std::string> keys;
  };

  /// Counts one more element of the enclosing array, if it is one.
  bool element() {
    if (!frames.empty() && frames.back().array)
      ++frames.back().index;
    return true;
  }
  /// The innermost open object, as kvrt's messages name fields:
  /// "kernels[2].cache"; "" for the top level.
  std::string path() const {
    std::string out;
    for (size_t i = 0; i + 1 < frames.size(); ++i) {
      if (frames[i].array)
        out += "[" + std::to_string(frames[i].index) + "]";
      else
        out += (out.empty() ? "" : ".") + frames[i].key;
    }
    return out;
  }

  std::vector<Frame> frames;
};

/// The input just before `byte` (where the parser stopped), quoted: the
/// parser's own message would quote everything it read of the token, which
/// for an unterminated string is the rest of the PTX.
std::string excerptBefore(const char *data, size_t size, size_t byte) {
  constexpr size_t kExcerptBytes = 32;
  size_t end = std::min(byte, size);
  size_t begin = end > kExcerptBytes ? end - kExcerptBytes : 0;
  return quote(std::string_view(data + begin, end - begin));
}

} // namespace

Status parseManifest(const char *data, size_t size, Manifest *out) {
  // An embedded bundle (kvgen --emit=header) may count its terminating NUL.
  while (size > 0 && data[size - 1] == '\0')
    --size;
  *out = Manifest();
  json root;
  try {
    RepeatedKeyFinder repeated;
    if (!json::sax_parse(data, data + size, &repeated) &&
        !repeated.repeatedKey.empty())
      return KVRT_BUNDLE_ERROR("%s has the key %s twice; each key of an "
                               "object may appear once",
                               repeated.repeatedObject.empty()
                                   ? "the manifest"
                                   : repeated.repeatedObject.c_str(),
                               quote(repeated.repeatedKey).c_str());
    root = json::parse(data, data + size);
  } catch (const json::parse_error &error) {
    // The parser's reason, without its "[json.exception...] " tag and its
    // "; last read: '...'" (unbounded, unescaped): a short quoted excerpt
    // instead.
    std::string_view reason = error.what();
    if (size_t tag = reason.find("] "); tag != std::string_view::npos)
      reason.remove_prefix(tag + 2);
    if (size_t read = reason.find("; last read:");
        read != std::string_view::npos)
      reason = reason.substr(0, read);
    return KVRT_BUNDLE_ERROR("not valid JSON: %s; the input before it: %s",
                             std::string(reason).c_str(),
                             excerptBefore(data, size, error.byte).c_str());
  } catch (const json::exception &error) {
    return KVRT_BUNDLE_ERROR("not valid JSON: %s", error.what());
  }
  try {
    return parseTop(root, out);
  } catch (const json::exception &error) {
    return KVRT_BUNDLE_ERROR("not valid JSON: %s", error.what());
  }
}

} // namespace kvrt::impl
