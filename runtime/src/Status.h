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

#include <memory>
#include <string>

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

/// Formats like printf; only failure paths call it.
std::string formatString(const char *format, ...)
    __attribute__((format(printf, 1, 2)));

/// Records a failed status as the calling thread's last error and returns its
/// code; an OK status returns KVRT_SUCCESS and leaves the last error alone.
kvrt_status publish(const Status &status);

/// The calling thread's last failure message ("" if none).
const char *lastErrorMessage();

/// The name of a status code ("KVRT_ERROR_INVALID_BUNDLE").
const char *statusName(kvrt_status code);

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
