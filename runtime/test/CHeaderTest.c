/* CHeaderTest.c - kvrt.h compiles as C.
 *
 * The C ABI is for any language; this file is compiled by the C compiler and
 * called from ManifestTest. */

#include "kvrt/kvrt.h"

int kvrtCHeaderLoads(const char *json, size_t size) {
  kvrt_bundle *bundle = NULL;
  kvrt_status status = kvrt_bundle_load_memory(json, size, &bundle);
  int kernels = status == KVRT_SUCCESS ? (int)kvrt_bundle_num_kernels(bundle)
                                       : -(int)status;
  kvrt_append_args args = {
      sizeof(kvrt_append_args), NULL, NULL, NULL, NULL, NULL, NULL,
      KVRT_VARIANT_AUTO,        NULL, NULL, NULL, NULL};
  kvrt_gather_args init = KVRT_ARGS_INIT(kvrt_gather_args);
  (void)init;
  (void)args;
  kvrt_bundle_destroy(bundle);
  return kernels;
}

/* Any int, as a C caller may pass it (C++ cannot form an enum value outside
 * the enum's range). */
const char *kvrtCStatusName(int code) {
  return kvrt_status_name((kvrt_status)code);
}
