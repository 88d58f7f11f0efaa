//===- Bundle.cpp - load a bundle; plan, pick a variant, and launch -------===//
//
// Every launch goes the same way: find the description, plan (validate every
// tensor), return early for zero tokens, pick the variant, pack, then run the
// host kernel or launch on the GPU. Nothing runs unless every step passed.
//
//===----------------------------------------------------------------------===//

#include "Bundle.h"

#include "Packing.h"
#include "PlanCache.h"
#include "Validation.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvrt::impl {

bool environmentFlag(const char *name) {
  const char *value = std::getenv(name);
  return value && std::strcmp(value, "1") == 0;
}

Status loadBundle(const char *data, size_t size, kvrt_bundle **out) {
  if (!out)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "out: is NULL");
  *out = nullptr;
  if (!data && size > 0)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "data: is NULL but size is %zu", size);
  Manifest manifest;
  KVRT_RETURN_IF_ERROR(parseManifest(data ? data : "", size, &manifest));
  *out = new kvrt_bundle(std::move(manifest));
  return Status();
}

/// The whole file; KVRT_ERROR_IO naming the path and the reason for anything
/// but a readable regular file (a directory opens, but is no bundle).
static Status readFile(const char *path, std::string *out) {
  int fd;
  do
    fd = ::open(path, O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return KVRT_ERROR(KVRT_ERROR_IO, "cannot open bundle %s: %s",
                      quote(path).c_str(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0)
    return KVRT_ERROR(KVRT_ERROR_IO, "cannot read bundle %s: %s",
                      quote(path).c_str(), std::strerror(errno));
  if (S_ISDIR(info.st_mode))
    return KVRT_ERROR(KVRT_ERROR_IO,
                      "cannot read bundle %s: it is a directory, not a bundle "
                      "file",
                      quote(path).c_str());
  if (S_ISREG(info.st_mode))
    out->reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return KVRT_ERROR(KVRT_ERROR_IO, "cannot read bundle %s: %s",
                        quote(path).c_str(), std::strerror(errno));
    if (n == 0)
      return Status();
    out->append(buffer, static_cast<size_t>(n));
  }
}

Status loadBundleFile(const char *path, kvrt_bundle **out) {
  if (!out)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "out: is NULL");
  *out = nullptr;
  if (!path)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "path: is NULL");
  std::string contents;
  KVRT_RETURN_IF_ERROR(readFile(path, &contents));
  Status status = loadBundle(contents.data(), contents.size(), out);
  if (!status.ok())
    return Status::error(status.getCode(),
                         formatString("%s: %s", quote(path).c_str(),
                                      status.getMessage().c_str()),
                         __FILE__, __LINE__);
  return status;
}

Status setChecked(kvrt_bundle *bundle, int enabled) {
  if (!bundle)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "bundle: is NULL");
  bundle->checked.store(enabled != 0, std::memory_order_relaxed);
  return Status();
}

Status setProgrammaticLaunch(kvrt_bundle *bundle, int enabled) {
  if (!bundle)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "bundle: is NULL");
  if (enabled) {
    const std::vector<KernelDescription> &kernels = bundle->manifest.kernels;
    bool any = std::any_of(
        kernels.begin(), kernels.end(),
        [](const KernelDescription &k) { return k.programmaticLaunch; });
    if (!any)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "enabled: no kernel of the bundle waits for its "
                        "producer (manifest programmatic_launch); compile it "
                        "with kvgen --programmatic-launch");
  }
  bundle->programmatic.store(enabled != 0, std::memory_order_relaxed);
  return Status();
}

Status setHostKernel(kvrt_bundle *bundle, const char *kernelName,
                     kvrt_host_kernel fn) {
  if (!bundle)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "bundle: is NULL");
  if (!kernelName)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "kernel_name: is NULL");
  const std::vector<KernelDescription> &kernels = bundle->manifest.kernels;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i].name == kernelName) {
      bundle->hostKernels[i].store(fn, std::memory_order_release);
      return Status();
    }
  }
  return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                    "kernel_name: the bundle has no kernel %s",
                    quote(kernelName).c_str());
}

//===----------------------------------------------------------------------===//
// Launch steps
//===----------------------------------------------------------------------===//

static Status findOperation(const Manifest &manifest, KernelKind kind,
                            const char *name, const Operation **out) {
  if (!name) {
    const Operation *only = nullptr;
    int count = 0;
    for (const Operation &operation : manifest.operations) {
      if (operation.kind == kind) {
        only = &operation;
        ++count;
      }
    }
    if (count == 1) {
      *out = only;
      return Status();
    }
    if (count == 0)
      return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                        "kernel: the bundle has no %s kernel", kindName(kind));
    std::string names;
    for (const Operation &operation : manifest.operations)
      if (operation.kind == kind)
        names += (names.empty() ? "'" : ", '") + operation.name + "'";
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "kernel: is NULL but the bundle has %d %s descriptions "
                      "(%s); name one",
                      count, kindName(kind), names.c_str());
  }
  auto found = manifest.operationByName.find(name);
  if (found != manifest.operationByName.end()) {
    const Operation &operation = manifest.operations[found->second];
    if (operation.kind != kind)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "kernel: '%s' is a %s kernel, not %s", name,
                        kindName(operation.kind), kindName(kind));
    *out = &operation;
    return Status();
  }
  for (const Operation &operation : manifest.operations)
    for (Variant variant : {Variant::Scalar, Variant::Wide})
      if (int index = operation.kernelOf(variant);
          index >= 0 && manifest.kernels[index].name == name)
        return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                          "kernel: '%s' is the %s variant of '%s'; name the "
                          "description '%s' and pass %s",
                          name, variantName(variant), operation.name.c_str(),
                          operation.name.c_str(),
                          variant == Variant::Wide ? "KVRT_VARIANT_WIDE"
                                                   : "KVRT_VARIANT_SCALAR");
  return KVRT_ERROR(KVRT_ERROR_NOT_FOUND, "kernel: the bundle has no kernel %s",
                    quote(name).c_str());
}

/// The caller's variant (AUTO where `field` is NULL), read as its bits: a C
/// caller may store any int there, and loading a value outside the enum's
/// range as a kvrt_variant is undefined in C++.
static Status readVariant(const kvrt_variant *field, kvrt_variant *out) {
  static_assert(sizeof(kvrt_variant) == sizeof(int),
                "kvrt_variant is an int-sized C enum");
  int raw = KVRT_VARIANT_AUTO;
  if (field)
    std::memcpy(&raw, field, sizeof(raw));
  if (raw != KVRT_VARIANT_AUTO && raw != KVRT_VARIANT_VECTOR &&
      raw != KVRT_VARIANT_SCALAR && raw != KVRT_VARIANT_WIDE)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "variant: %d is not a kvrt_variant", raw);
  *out = static_cast<kvrt_variant>(raw);
  return Status();
}

//===----------------------------------------------------------------------===//
// The vector promise
//===----------------------------------------------------------------------===//

// The vector variant assumes aligned base pointers, a unit inner stride and
// outer strides that are multiples of its vector width (docs/KERNEL-ABI.md,
// "The vector promise"). AUTO checks without allocating and falls back to
// the scalar variant; a forced VECTOR launch is refused with the breach.

namespace {
/// The first tensor, and its rule, that breaks the vector promise.
struct PromiseBreach {
  const TensorView *view = nullptr;
  enum Rule { Alignment, InnerStride, OuterStride } rule = Alignment;
  int dim = 0;
};
} // namespace

/// Whether every promised tensor meets `vector`'s promise; the first breach
/// otherwise. Allocates nothing: AUTO falls back without a message.
static bool checkVectorPromise(const LaunchPlan &plan,
                               const KernelDescription &vector,
                               PromiseBreach *breach) {
  // Powers of two in practice: masks instead of 64-bit divisions.
  uint64_t alignmentMask = static_cast<uint64_t>(vector.alignment) - 1;
  int64_t elems = vector.vectorElems;
  bool elemsPowerOfTwo = (elems & (elems - 1)) == 0;
  auto multiple = [&](int64_t stride) {
    return elemsPowerOfTwo ? (stride & (elems - 1)) == 0 : stride % elems == 0;
  };
  for (int p = 0; p < plan.numPromised; ++p) {
    const TensorView &view = plan.buffers[plan.promised[p]];
    if (view.extent == 0)
      continue;
    breach->view = &view;
    if (view.begin() & alignmentMask) {
      breach->rule = PromiseBreach::Alignment;
      return false;
    }
    int inner = view.rank - 1;
    for (int i = 0; i < view.rank; ++i) {
      if (view.shape[i] == 1)
        continue;
      if (i == inner && view.strides[i] != 1) {
        breach->rule = PromiseBreach::InnerStride;
        breach->dim = i;
        return false;
      }
      if (i != inner && !multiple(view.strides[i])) {
        breach->rule = PromiseBreach::OuterStride;
        breach->dim = i;
        return false;
      }
    }
  }
  breach->view = nullptr;
  return true;
}

/// The refusal for a forced launch that breaks the promise.
static Status describeBreach(const PromiseBreach &breach,
                             const KernelDescription &vector) {
  const TensorView &view = *breach.view;
  switch (breach.rule) {
  case PromiseBreach::Alignment:
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: data + byte_offset (%p) is not aligned to %lld "
                      "bytes, which the %s variant '%s' assumes (AUTO "
                      "would use the scalar variant)",
                      view.name, static_cast<void *>(view.first),
                      static_cast<long long>(vector.alignment),
                      variantName(vector.variant), vector.name.c_str());
  case PromiseBreach::InnerStride:
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: stride[%d] is %lld but the %s variant '%s' "
                      "assumes a contiguous innermost dimension (stride 1) "
                      "(AUTO would use the scalar variant)",
                      view.name, breach.dim,
                      static_cast<long long>(view.strides[breach.dim]),
                      variantName(vector.variant), vector.name.c_str());
  case PromiseBreach::OuterStride:
    break;
  }
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: stride[%d] is %lld, not a multiple of vector_elems "
                    "(%lld), which the %s variant '%s' assumes (AUTO would "
                    "use the scalar variant)",
                    view.name, breach.dim,
                    static_cast<long long>(view.strides[breach.dim]),
                    static_cast<long long>(vector.vectorElems),
                    variantName(vector.variant), vector.name.c_str());
}

/// Whether AUTO picks a wide kernel for `numTokens` tokens: from its
/// min_tokens on, and below its max_tokens where it has one.
static bool inWideRange(const KernelDescription &wide, int64_t numTokens) {
  return numTokens >= wide.minTokens &&
         (wide.maxTokens == 0 || numTokens < wide.maxTokens);
}

/// Picks the manifest kernel to run. On the host a variant is available only
/// once its host kernel is registered; on the GPU when the manifest has it.
static Status selectKernel(const kvrt_bundle &bundle,
                           const Operation &operation, const LaunchPlan &plan,
                           kvrt_variant requested, int *out) {
  const Manifest &manifest = bundle.manifest;
  bool host = plan.device.device_type == kDLCPU;
  auto available = [&](int index) {
    return index >= 0 &&
           (!host || bundle.hostKernels[index].load(std::memory_order_acquire));
  };
  auto unregistered = [&](int index) {
    return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                      "%s: on %s, but no host kernel is registered for '%s' "
                      "(kvrt_bundle_set_host_kernel)",
                      plan.buffers[0].name, describeDevice(plan.device).c_str(),
                      manifest.kernels[index].name.c_str());
  };
  auto missing = [&](const char *variant) {
    return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                      "variant: the bundle has no %s variant of '%s'", variant,
                      operation.name.c_str());
  };

  int vector = operation.kernelOf(Variant::Vector);
  int scalar = operation.kernelOf(Variant::Scalar);
  int wide = operation.kernelOf(Variant::Wide);
  int promised = operation.promiseKernel();
  PromiseBreach breach;
  bool promise = promised >= 0 &&
                 checkVectorPromise(plan, manifest.kernels[promised], &breach);
  auto forced = [&](int index, const char *variant) {
    if (index < 0)
      return missing(variant);
    if (index != scalar && !promise)
      return describeBreach(breach, manifest.kernels[index]);
    if (!available(index))
      return unregistered(index);
    *out = index;
    return Status();
  };
  switch (requested) {
  case KVRT_VARIANT_VECTOR:
    return forced(vector, "vector");
  case KVRT_VARIANT_WIDE:
    return forced(wide, "wide");
  case KVRT_VARIANT_SCALAR:
    return forced(scalar, "scalar");
  case KVRT_VARIANT_AUTO:
    break;
  }
  // From the token count alone, never from the slots' values: a graph
  // captured at one shape replays the kernel picked for it.
  if (promise && available(wide) &&
      (inWideRange(manifest.kernels[wide], plan.numTokens) ||
       !available(vector)))
    *out = wide;
  else if (promise && available(vector))
    *out = vector;
  else if (available(scalar))
    *out = scalar;
  else if (scalar >= 0)
    return unregistered(scalar);
  else if (!promise)
    return describeBreach(breach, manifest.kernels[promised]);
  else
    return unregistered(vector >= 0 ? vector : wide);
  return Status();
}

static Status run(kvrt_bundle &bundle, const LaunchPlan &plan,
                  kvrt_variant variant, kvrt_stream stream) {
  int kernel = -1;
  KVRT_RETURN_IF_ERROR(
      selectKernel(bundle, *plan.operation, plan, variant, &kernel));
  PackedParams params(plan);
  if (plan.device.device_type == kDLCPU) {
    kvrt_host_kernel fn =
        bundle.hostKernels[kernel].load(std::memory_order_acquire);
    fn(params.data());
    return Status();
  }
  const Manifest &manifest = bundle.manifest;
  if (!manifest.hasPtx && !manifest.hasCubin)
    return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                      "%s: on %s but the bundle is host-only (no ptx, no "
                      "cubin_base64)",
                      plan.buffers[0].name,
                      describeDevice(plan.device).c_str());
  bool programmatic = bundle.programmatic.load(std::memory_order_relaxed) &&
                      manifest.kernels[kernel].programmaticLaunch;
  return bundle.gpu.launch(plan, kernel, params, stream, programmatic);
}

/// The caller's struct as this kvrt knows it: refused below its first
/// version's size; the fields past the caller's struct_size (a kvrt newer
/// than the caller's header) read as zero, a newer caller's extra ones are
/// not read.
template <typename Args> static Status readArgs(const Args *args, Args *out) {
  if (!args)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "args: is NULL");
  size_t size = args->struct_size;
  if (size < ArgsInfo<Args>::minimum)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "args: struct_size is %zu, smaller than any %s (%zu "
                      "bytes); set it to sizeof(%s), as KVRT_ARGS_INIT does",
                      size, ArgsInfo<Args>::name, ArgsInfo<Args>::minimum,
                      ArgsInfo<Args>::name);
  *out = Args();
  std::memcpy(static_cast<void *>(out), args, std::min(size, sizeof(Args)));
  return Status();
}

template <typename Args>
Status launch(kvrt_bundle *bundle, const Args *given, kvrt_stream stream) {
  if (!bundle)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, "bundle: is NULL");
  Args args;
  KVRT_RETURN_IF_ERROR(readArgs(given, &args));
  kvrt_variant variant = KVRT_VARIANT_AUTO;
  if constexpr (HasVariant<Args>::value)
    KVRT_RETURN_IF_ERROR(readVariant(&args.variant, &variant));
  constexpr KernelKind kind = ArgsInfo<Args>::kind;
  // The same arguments as a launch this thread planned: the same plan.
  LaunchKey key(bundle->id, kind, args.kernel);
  addArguments(key, args);
  const LaunchPlan *remembered = PlanCache::find(key);
  LaunchPlan fresh;
  if (!remembered) {
    const Operation *operation = nullptr;
    KVRT_RETURN_IF_ERROR(
        findOperation(bundle->manifest, kind, args.kernel, &operation));
    const DLTensor *tensors[kNumParamIds] = {};
    forEachTensor(args, [&](const DLTensor *tensor, abi::Param param) {
      tensors[static_cast<int>(param)] = tensor;
    });
    KVRT_RETURN_IF_ERROR(planLaunch(
        bundle->manifest, *operation,
        bundle->specs[operation - bundle->manifest.operations.data()], tensors,
        &fresh));
    PlanCache::remember(key, fresh);
  }
  const LaunchPlan &plan = remembered ? *remembered : fresh;
  // Nothing to write; a GPU launch of zero blocks would be an error.
  if (plan.numTokens == 0)
    return Status();
  if (bundle->checked.load(std::memory_order_relaxed))
    KVRT_RETURN_IF_ERROR(
        checkSlots(plan, [&](const TensorView &view, void *out, size_t bytes) {
          if (plan.device.device_type == kDLCPU) {
            std::memcpy(out, view.first, bytes);
            return Status();
          }
          return bundle->gpu.copyToHost(plan, view, out, bytes, stream);
        }));
  return run(*bundle, plan, variant, stream);
}

#define KVRT_INSTANTIATE_LAUNCH(Kind, Struct, FirstSize, Entry, Variant)       \
  template Status launch(kvrt_bundle *, const Struct *, kvrt_stream);
KVRT_FOR_EACH_KIND(KVRT_INSTANTIATE_LAUNCH)
#undef KVRT_INSTANTIATE_LAUNCH

} // namespace kvrt::impl
