//===- kvrt.hpp - C++ convenience layer over kvrt's C ABI -----------------===//
//
// Header-only, on top of kvrt.h: a Status that carries the code and the
// message of a failed call, and a move-only Bundle that destroys its
// kvrt_bundle. It throws nothing; every call returns a Status.
//
//   kvrt::Bundle bundle;
//   if (kvrt::Status status = kvrt::Bundle::loadFile(path, bundle); !status)
//     std::cerr << status.toString() << "\n";
//   kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
//   kvrt::Status status = bundle.launch(args, stream);
//
// launch() has an overload for each kind's args struct, made from kvrt.h's
// KVRT_FOR_EACH_KIND, so that a new kind needs nothing here.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_KVRT_HPP
#define KVRT_KVRT_HPP

#include "kvrt/kvrt.h"

#include <string>
#include <utility>
#include <vector>

namespace kvrt {

/// The outcome of one kvrt call: KVRT_SUCCESS, or a code and the message
/// kvrt_last_error() gave right after the failure.
class [[nodiscard]] Status {
public:
  Status() = default;
  /// Captures the calling thread's last error when `code` is a failure; call
  /// it straight after the kvrt call that returned `code`.
  static Status fromCode(kvrt_status code) {
    Status status;
    status.code = code;
    if (code != KVRT_SUCCESS)
      status.message = kvrt_last_error();
    return status;
  }

  bool ok() const { return code == KVRT_SUCCESS; }
  explicit operator bool() const { return ok(); }
  kvrt_status getCode() const { return code; }
  const std::string &getMessage() const { return message; }

  /// "KVRT_ERROR_INVALID_ARGUMENT: key: dtype is f16 but ...".
  std::string toString() const {
    if (ok())
      return kvrt_status_name(code);
    return std::string(kvrt_status_name(code)) + ": " + message;
  }

private:
  kvrt_status code = KVRT_SUCCESS;
  std::string message;
};

/// Owns a kvrt_bundle. Thread-safe as kvrt_bundle is: launches from several
/// threads at once are fine; destroying while one runs is not.
class Bundle {
public:
  Bundle() = default;
  /// Takes ownership of `bundle`.
  explicit Bundle(kvrt_bundle *bundle) : bundle(bundle) {}
  Bundle(Bundle &&other) noexcept : bundle(other.release()) {}
  Bundle &operator=(Bundle &&other) noexcept {
    if (this != &other)
      reset(other.release());
    return *this;
  }
  Bundle(const Bundle &) = delete;
  Bundle &operator=(const Bundle &) = delete;
  ~Bundle() { reset(); }

  static Status loadFile(const std::string &path, Bundle &out) {
    kvrt_bundle *loaded = nullptr;
    Status status =
        Status::fromCode(kvrt_bundle_load_file(path.c_str(), &loaded));
    out.reset(loaded);
    return status;
  }
  static Status loadMemory(const void *data, size_t size, Bundle &out) {
    kvrt_bundle *loaded = nullptr;
    Status status =
        Status::fromCode(kvrt_bundle_load_memory(data, size, &loaded));
    out.reset(loaded);
    return status;
  }

  kvrt_bundle *get() const { return bundle; }
  explicit operator bool() const { return bundle != nullptr; }
  kvrt_bundle *release() { return std::exchange(bundle, nullptr); }
  void reset(kvrt_bundle *replacement = nullptr) {
    kvrt_bundle_destroy(std::exchange(bundle, replacement));
  }

  size_t numKernels() const { return kvrt_bundle_num_kernels(bundle); }
  /// Every kernel name, both variants.
  std::vector<std::string> kernelNames() const {
    std::vector<std::string> names;
    for (size_t i = 0, e = numKernels(); i < e; ++i)
      names.emplace_back(kvrt_bundle_kernel_name(bundle, i));
    return names;
  }

  Status setHostKernel(const char *kernelName, kvrt_host_kernel fn) {
    return Status::fromCode(
        kvrt_bundle_set_host_kernel(bundle, kernelName, fn));
  }
  /// One launch: the entry point of the kind whose args struct `args` is.
#define KVRT_HPP_LAUNCH(Kind, Struct, FirstSize, Entry, HasVariant)            \
  Status launch(const Struct &args, kvrt_stream stream = nullptr) {            \
    return Status::fromCode(Entry(bundle, &args, stream));                     \
  }
  KVRT_FOR_EACH_KIND(KVRT_HPP_LAUNCH)
#undef KVRT_HPP_LAUNCH

  /// launch() by the names of earlier releases.
  Status append(const kvrt_append_args &args, kvrt_stream stream = nullptr) {
    return launch(args, stream);
  }
  Status buildSlotMapping(const kvrt_slot_mapping_args &args,
                          kvrt_stream stream = nullptr) {
    return launch(args, stream);
  }
  Status fusedAppend(const kvrt_fused_append_args &args,
                     kvrt_stream stream = nullptr) {
    return launch(args, stream);
  }
  Status pagedKvAppend(const kvrt_paged_kv_append_args &args,
                       kvrt_stream stream = nullptr) {
    return launch(args, stream);
  }
  Status gather(const kvrt_gather_args &args, kvrt_stream stream = nullptr) {
    return launch(args, stream);
  }
  /// Programmatic dependent launch (kvrt_bundle_set_programmatic_launch).
  Status setProgrammaticLaunch(bool enabled) {
    return Status::fromCode(
        kvrt_bundle_set_programmatic_launch(bundle, enabled ? 1 : 0));
  }

  /// Checked mode (kvrt_bundle_set_checked): a debugging aid.
  Status setChecked(bool enabled) {
    return Status::fromCode(kvrt_bundle_set_checked(bundle, enabled ? 1 : 0));
  }
  /// Kernel `index`'s manifest entry as compact JSON; "" if out of range.
  std::string kernelManifest(size_t index) const {
    const char *text = kvrt_bundle_kernel_manifest(bundle, index);
    return text ? text : "";
  }

private:
  kvrt_bundle *bundle = nullptr;
};

} // namespace kvrt

#endif // KVRT_KVRT_HPP
