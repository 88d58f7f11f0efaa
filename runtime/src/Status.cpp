//===- Status.cpp - kvrt's status value and the per-thread last error -----===//

#include "Status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace kvrt::impl {

// Per thread, so that two threads launching at once each read their own
// failure, as kvrt.h promises.
static thread_local std::string lastError;

Status Status::error(kvrt_status code, std::string message, const char *file,
                     int line) {
  Status status;
  status.failure.reset(new Failure{code, std::move(message), file, line});
  return status;
}

const std::string &Status::getMessage() const {
  static const std::string empty;
  return failure ? failure->message : empty;
}

std::string Status::toString() const {
  if (ok())
    return std::string();
  std::string result = failure->message;
  if (failure->file) {
    // Only the file name: the build directory says nothing to a user.
    const char *base = std::strrchr(failure->file, '/');
    result += formatString(" [%s %s:%d]", statusName(failure->code),
                           base ? base + 1 : failure->file, failure->line);
  }
  return result;
}

std::string formatString(const char *format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string result;
  if (length > 0) {
    result.resize(static_cast<size_t>(length) + 1);
    std::vsnprintf(result.data(), result.size(), format, args);
    result.resize(static_cast<size_t>(length));
  }
  va_end(args);
  return result;
}

kvrt_status publish(const Status &status) {
  if (status.ok())
    return KVRT_SUCCESS;
  // Assigning a string can throw std::bad_alloc; nothing may escape the C ABI,
  // and a lost message is better than a terminated process.
  try {
    lastError = status.toString();
  } catch (...) {
    lastError.clear();
  }
  return status.getCode();
}

const char *statusName(kvrt_status code) {
  switch (code) {
  case KVRT_SUCCESS:
    return "KVRT_SUCCESS";
  case KVRT_ERROR_INVALID_ARGUMENT:
    return "KVRT_ERROR_INVALID_ARGUMENT";
  case KVRT_ERROR_INVALID_BUNDLE:
    return "KVRT_ERROR_INVALID_BUNDLE";
  case KVRT_ERROR_NOT_FOUND:
    return "KVRT_ERROR_NOT_FOUND";
  case KVRT_ERROR_NO_DRIVER:
    return "KVRT_ERROR_NO_DRIVER";
  case KVRT_ERROR_NO_DEVICE:
    return "KVRT_ERROR_NO_DEVICE";
  case KVRT_ERROR_UNSUPPORTED_DEVICE:
    return "KVRT_ERROR_UNSUPPORTED_DEVICE";
  case KVRT_ERROR_DRIVER:
    return "KVRT_ERROR_DRIVER";
  case KVRT_ERROR_IO:
    return "KVRT_ERROR_IO";
  }
  return "KVRT_ERROR_UNKNOWN";
}

const char *lastErrorMessage() { return lastError.c_str(); }

} // namespace kvrt::impl
