//===- Status.h - kvrt's status value, threaded through every call --------===//
//
// Every internal function that can fail returns a Status (IREE-style): a
// kvrt_status code, a message in the user's terms, and the file and line that
// raised it. An OK status carries no string, so success costs no allocation
// (the launch path must allocate nothing). At the C ABI boundary a failing
// Status becomes the calling thread's last error.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_STATUS_H
#define KVRT_SRC_STATUS_H

#include "kvrt/kvrt.h"

#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>

namespace kvrt::impl {

class [[nodiscard]] Status {
public:
  /// OK: one null pointer, so that the many OK statuses of a launch cost
  /// nothing to make, move or destroy.
  Status() = default;
  Status(Status &&) noexcept = default;
  Status &operator=(Status &&) noexcept = default;
  Status(const Status &other)
      : failure(other.failure ? new Failure(*other.failure) : nullptr) {}
  Status &operator=(const Status &other) {
    if (this != &other)
      failure.reset(other.failure ? new Failure(*other.failure) : nullptr);
    return *this;
  }

  static Status error(kvrt_status code, std::string message, const char *file,
                      int line);

  bool ok() const { return !failure; }
  kvrt_status getCode() const { return failure ? failure->code : KVRT_SUCCESS; }
  const std::string &getMessage() const;

  /// The message with the origin appended, as kvrt_last_error() reports it.
  std::string toString() const;

private:
  struct Failure {
    kvrt_status code;
    std::string message;
    const char *file;
    int line;
  };
  std::unique_ptr<Failure> failure;
};

/// `text` in single quotes for a message: non-printable bytes escaped
/// ("\x00"), cut to limits::kMaxQuotedBytes. Every string from a bundle or a
/// caller goes through it, so that a NUL cannot end a name early.
std::string quote(std::string_view text);

/// Formats like printf; only failure paths call it.
std::string formatString(const char *format, ...)
    __attribute__((format(printf, 1, 2)));

/// Records a failed status as the calling thread's last error and returns its
/// code; an OK status returns KVRT_SUCCESS and leaves the last error alone.
kvrt_status publish(const Status &status);

/// The calling thread's last failure message ("" if none).
const char *lastErrorMessage();

/// The name of a status code ("KVRT_ERROR_INVALID_BUNDLE").
const char *statusName(int code);

/// Publishes `code` with a fixed message, allocating as little as it can:
/// for the paths where an allocation just failed.
kvrt_status publishNoThrow(kvrt_status code, const char *message) noexcept;

/// Runs `body` (returning a Status) for a C entry point and publishes its
/// outcome. No exception crosses into a C caller. The caller's input never
/// causes one (every rule is a check with a status): what escapes is a host
/// allocation (KVRT_ERROR_OUT_OF_MEMORY) or a kvrt bug (KVRT_ERROR_INTERNAL).
template <typename Body> kvrt_status guarded(Body &&body) noexcept {
  try {
    return publish(body());
  } catch (const std::bad_alloc &) {
    return publishNoThrow(KVRT_ERROR_OUT_OF_MEMORY,
                          "kvrt ran out of host memory");
  } catch (const std::exception &error) {
    try {
      return publish(
          Status::error(KVRT_ERROR_INTERNAL,
                        std::string("kvrt internal error: ") + error.what(),
                        __FILE__, __LINE__));
    } catch (...) {
      return publishNoThrow(KVRT_ERROR_INTERNAL, "kvrt internal error");
    }
  } catch (...) {
    return publishNoThrow(KVRT_ERROR_INTERNAL,
                          "kvrt internal error: unknown exception");
  }
}

} // namespace kvrt::impl

#define KVRT_ERROR(code, ...)                                                  \
  ::kvrt::impl::Status::error((code), ::kvrt::impl::formatString(__VA_ARGS__), \
                              __FILE__, __LINE__)

#define KVRT_RETURN_IF_ERROR(expr)                                             \
  do {                                                                         \
    ::kvrt::impl::Status kvrtStatus_ = (expr);                                 \
    if (!kvrtStatus_.ok())                                                     \
      return kvrtStatus_;                                                      \
  } while (false)

#endif // KVRT_SRC_STATUS_H
