//===- Manifest.cpp - the kernel to time, read through kvrt ---------------===//

#include "Manifest.h"
#include "Latent.h"
#include "Options.h"

#include "kvrt/kvrt.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace kvbench {
namespace {

template <typename Enum>
Enum parseOrDie(bool (*parse)(std::string_view, Enum *), const json &entry,
                const json &value, const char *what) {
  Enum out{};
  if (!value.is_string() || !parse(value.get<std::string>(), &out))
    fatal(std::string("the manifest entry has an unknown ") + what + " " +
          value.dump() + ": " + entry.dump());
  return out;
}

/// Kernel `index`'s manifest entry, as kvrt read it from the bundle.
json manifestEntry(const kvrt_bundle *bundle, size_t index) {
  const char *text = kvrt_bundle_kernel_manifest(bundle, index);
  if (!text)
    fatal(format("kvrt has no manifest entry for kernel %zu: %s", index,
                 kvrt_last_error()));
  try {
    return json::parse(text);
  } catch (const json::exception &e) {
    fatal(std::string("kvrt's manifest entry is not JSON: ") + e.what());
  }
}

bool isAppend(const std::string &kindName) {
  abi::KernelKind kind;
  return abi::parseKind(kindName, &kind) &&
         (kind == abi::KernelKind::Append ||
          kind == abi::KernelKind::MlaAppend);
}

} // namespace

Description descriptionFromManifest(const json &entry) {
  Description d;
  try {
    const json &cache = entry.at("cache");
    d.layout =
        parseOrDie(abi::parseLayout, entry, cache.at("layout"), "layout");
    d.blockSize =
        cache.at(abi::layoutInfo(d.layout).tokensName()).get<int64_t>();
    d.numHeads = cache.at("num_kv_heads").get<int64_t>();
    d.headDim = cache.at("head_dim").get<int64_t>();
    d.cacheDtype =
        parseOrDie(abi::parseDType, entry, cache.at("dtype"), "cache dtype");
    d.sourceDtype = parseOrDie(abi::parseDType, entry, entry.at("source_dtype"),
                               "source dtype");
    d.x = cache.contains("x") ? cache.at("x").get<int64_t>()
                              : int64_t(16 / abi::dtypeBytes(d.cacheDtype));
    if (cache.contains("quant")) {
      const json &q = cache.at("quant");
      QuantDesc quant;
      quant.kind =
          parseOrDie(abi::parseQuantKind, entry, q.at("kind"), "quant kind");
      quant.granularity = parseOrDie(abi::parseGranularity, entry,
                                     q.at("granularity"), "granularity");
      quant.mode =
          parseOrDie(abi::parseScaleMode, entry, q.at("mode"), "scale mode");
      quant.reciprocal = q.value("reciprocal", false);
      d.quant = quant;
    }
    readKOnly(entry, cache, d);
  } catch (const json::exception &e) {
    fatal(std::string("the manifest entry lacks a field kvbench needs: ") +
          e.what() + "\nentry: " + entry.dump());
  }
  return d;
}

bool kvrtNameOf(const std::string &name, const std::string &manifestVariant,
                const std::string &requested, KernelChoice *out,
                std::string *error) {
  out->manifestName = name;
  out->kvrtName = name;
  out->variant = requested;
  abi::Variant variant;
  if (!abi::parseVariant(manifestVariant, &variant)) {
    *error = "kernel '" + name + "' has the unknown variant '" +
             manifestVariant + "'";
    return false;
  }
  // A scalar or wide kernel is its description's name plus a suffix, and
  // naming it forces its variant.
  const std::string suffix = abi::variantSuffix(variant);
  if (suffix.empty())
    return true;
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    *error =
        manifestVariant + " kernel '" + name + "' does not end in " + suffix;
    return false;
  }
  out->kvrtName.resize(name.size() - suffix.size());
  out->variant = manifestVariant;
  return true;
}

KernelChoice pickKernel(kvrt_bundle *bundle, const std::string &bundlePath,
                        const std::string &wanted, const std::string &variant) {
  const size_t count = kvrt_bundle_num_kernels(bundle);
  std::string names;
  std::vector<size_t> appends;
  size_t match = count;
  for (size_t i = 0; i < count; ++i) {
    const std::string name = kvrt_bundle_kernel_name(bundle, i);
    const std::string kind = kvrt_bundle_kernel_kind(bundle, i);
    const std::string var = kvrt_bundle_kernel_variant(bundle, i);
    names += " " + name + "(" + kind + "," + var + ")";
    if (isAppend(kind) && var == abi::variantName(abi::Variant::Vector))
      appends.push_back(i);
    if (name == wanted)
      match = i;
  }
  logLine("bundle %s: kernels:%s", bundlePath.c_str(), names.c_str());
  if (wanted.empty()) {
    if (appends.size() != 1)
      fatal(format("the bundle has %zu append descriptions; name one with "
                   "--kernel",
                   appends.size()));
    match = appends[0];
  }
  if (match == count) {
    std::fprintf(stderr,
                 "kvbench: no kernel '%s' in the bundle %s; it has:%s\n",
                 wanted.c_str(), bundlePath.c_str(), names.c_str());
    std::exit(kExitNoSuchKernel);
  }
  const std::string kind = kvrt_bundle_kernel_kind(bundle, match);
  if (!isAppend(kind))
    fatal("kvbench times append kernels; '" + wanted + "' is a " + kind);
  KernelChoice choice;
  std::string error;
  if (!kvrtNameOf(kvrt_bundle_kernel_name(bundle, match),
                  kvrt_bundle_kernel_variant(bundle, match), variant, &choice,
                  &error))
    fatal(error);
  choice.manifest = manifestEntry(bundle, match);
  return choice;
}

} // namespace kvbench
