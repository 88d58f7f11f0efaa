//===- Status.cpp - kvrt's status value and the per-thread last error -----===//

#include "Status.h"

#include "Limits.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace kvrt::impl {

// Per thread, so that two threads launching at once each read their own
// failure, as kvrt.h promises.
static thread_local std::string lastError;

/// Appends `c` to `out`, escaped if it is not printable ASCII ("\x00").
static void appendEscaped(std::string &out, unsigned char c) {
  if (c >= 0x20 && c < 0x7f) {
    out += static_cast<char>(c);
    return;
  }
  static const char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

std::string quote(std::string_view text) {
  std::string out = "'";
  size_t limit = limits::kMaxQuotedBytes;
  for (size_t i = 0; i < text.size() && i < limit; ++i)
    appendEscaped(out, static_cast<unsigned char>(text[i]));
  if (text.size() > limit)
    out += formatString("...' (%zu bytes)", text.size());
  else
    out += "'";
  return out;
}

/// Cuts `text` to at most `limit` bytes, "..." included, never inside a
/// "\xNN" escape.
static void cutTo(std::string &text, size_t limit) {
  if (text.size() <= limit)
    return;
  size_t keep = limit - 3;
  size_t backslash = text.rfind('\\', keep);
  if (backslash != std::string::npos && backslash + 4 > keep)
    keep = backslash;
  text.resize(keep);
  text += "...";
}

Status Status::error(kvrt_status code, std::string message, const char *file,
                     int line) {
  // Messages quote the caller's input (bundle fields, driver logs): keep
  // them one printable line of bounded length, whatever the input holds.
  std::string bounded;
  bounded.reserve(std::min(message.size(), limits::kMaxMessageBytes) + 8);
  for (unsigned char c : message) {
    // Past the limit by an escape at most: cutTo() below trims it.
    if (bounded.size() > limits::kMaxMessageBytes)
      break;
    if (c == '\n' || c == '\t')
      bounded += ' ';
    else
      appendEscaped(bounded, c);
  }
  cutTo(bounded, limits::kMaxMessageBytes);
  Status status;
  status.failure.reset(new Failure{code, std::move(bounded), file, line});
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
    std::string where =
        formatString(" [%s %s:%d]", statusName(failure->code),
                     base ? base + 1 : failure->file, failure->line);
    // The whole message, where included, within the documented bound.
    cutTo(result, limits::kMaxMessageBytes - where.size());
    result += where;
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

kvrt_status publishNoThrow(kvrt_status code, const char *message) noexcept {
  try {
    lastError = message;
  } catch (...) {
    lastError.clear();
  }
  return code;
}

const char *statusName(int code) {
  switch (code) {
#define KVRT_STATUS_NAME(Code)                                                 \
  case Code:                                                                   \
    return #Code;
    KVRT_STATUS_NAME(KVRT_SUCCESS)
    KVRT_STATUS_NAME(KVRT_ERROR_INVALID_ARGUMENT)
    KVRT_STATUS_NAME(KVRT_ERROR_INVALID_BUNDLE)
    KVRT_STATUS_NAME(KVRT_ERROR_NOT_FOUND)
    KVRT_STATUS_NAME(KVRT_ERROR_NO_DRIVER)
    KVRT_STATUS_NAME(KVRT_ERROR_NO_DEVICE)
    KVRT_STATUS_NAME(KVRT_ERROR_UNSUPPORTED_DEVICE)
    KVRT_STATUS_NAME(KVRT_ERROR_DRIVER)
    KVRT_STATUS_NAME(KVRT_ERROR_IO)
    KVRT_STATUS_NAME(KVRT_ERROR_INTERNAL)
    KVRT_STATUS_NAME(KVRT_ERROR_OUT_OF_MEMORY)
#undef KVRT_STATUS_NAME
  }
  return "KVRT_ERROR_UNKNOWN";
}

const char *lastErrorMessage() { return lastError.c_str(); }

} // namespace kvrt::impl
