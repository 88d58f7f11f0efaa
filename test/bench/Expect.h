//===- Expect.h - the bench tests' checks -----------------------*- C++ -*-===//
//
// kvbench's unit tests run without a test framework (the bench builds
// without GoogleTest): EXPECT counts a failed condition and goes on, and
// finish() prints the verdict and gives main's exit status.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_TEST_EXPECT_H
#define KVGEN_BENCH_TEST_EXPECT_H

#include <cstdio>

namespace kvbench::test {

/// The failed EXPECTs of the test program so far.
inline int failures = 0;

/// Prints the verdict; main's exit status.
inline int finish() {
  std::printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}

} // namespace kvbench::test

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
      ++kvbench::test::failures;                                               \
    }                                                                          \
  } while (0)

#endif // KVGEN_BENCH_TEST_EXPECT_H
