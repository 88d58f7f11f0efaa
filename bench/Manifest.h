//===- Manifest.h - the kernel to time, read through kvrt -------*- C++ -*-===//
//
// kvbench opens the bundle with kvrt, as an application does, and asks kvrt
// which kernels it holds (names, kinds, variants). The description of the
// chosen kernel is its manifest entry, which kvrt hands out as JSON where it
// has kvrt_bundle_kernel_manifest; manifestEntry() is the one place that
// knows how the entry is obtained.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_MANIFEST_H
#define KVGEN_BENCH_MANIFEST_H

#include "Geometry.h"
#include "Support.h"

#include <string>

struct kvrt_bundle;

namespace kvbench {

struct KernelChoice {
  /// The manifest's name of the chosen kernel (NAME, NAME_scalar or
  /// NAME_wide).
  std::string manifestName;
  /// The name kvrt_append takes: the description's (vector variant's) name.
  std::string kvrtName;
  std::string variant;
  json manifest;
};

/// Reads a description out of one manifest entry; a missing or unknown field
/// is fatal, naming it.
Description descriptionFromManifest(const json &entry);

/// The kvrt name and variant of manifest name `name` of variant
/// `manifestVariant`, under the --variant `requested`: a scalar or wide
/// kernel's kvrt name drops its "_scalar" or "_wide" suffix and forces its
/// variant. False (with `*error`) if its name lacks the suffix.
bool kvrtNameOf(const std::string &name, const std::string &manifestVariant,
                const std::string &requested, KernelChoice *out,
                std::string *error);

/// Picks the append kernel `wanted` (or the bundle's only vector append if
/// empty) of a loaded bundle. A name the bundle lacks exits with
/// kExitNoSuchKernel after listing what it has.
KernelChoice pickKernel(kvrt_bundle *bundle, const std::string &bundlePath,
                        const std::string &wanted, const std::string &variant);

} // namespace kvbench

#endif // KVGEN_BENCH_MANIFEST_H
