/*===- kvext.h - kvgen._kvext's two halves share these ------------------===*\
|*                                                                            *|
|* kvext.c is the module and kvrt's launch (described tensors, the args       *|
|* structs); kvext_fast.c is the ops' fast path (tensors read through their  *|
|* type's DLPack exchange API, the table of checked signatures). Both build  *|
|* one launch's tensors in a `tensors` frame and call kvrt through            *|
|* kvext_call_kvrt.                                                           *|
\*===----------------------------------------------------------------------===*/

#ifndef KVGEN_PYTHON_SRC_KVEXT_H
#define KVGEN_PYTHON_SRC_KVEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <kvrt/kvrt.h>

#include <stdint.h>
#include <string.h>

enum {
  MAX_RANK = 5,
  MAX_TENSORS = 20,
  TABLE_ENTRIES = 16,
  MAX_TYPES = 4,
};

/* The DLPack 1.x C exchange API (dlpack.h 1.3), declared here because the
 * DLPack header kvrt builds against may predate it. Only the fields used are
 * typed. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} kvext_dlpack_version;

typedef struct kvext_exchange_api {
  kvext_dlpack_version version;
  void *prev_api;
  void *managed_tensor_allocator;
  void *managed_tensor_from_py_object_no_sync;
  void *managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
  int (*current_work_stream)(int device_type, int32_t device_id,
                             void **out_stream);
} kvext_exchange_api;

/* The kernel kinds, in include/kvgen/ABI/KernelKinds.def's order: the
 * numbers launch() and args_struct() take, and the order of init()'s entry
 * points. */
enum {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) KIND_##Id,
#include <kvgen/ABI/KernelKinds.def>
  NUM_KINDS,
};

/* A launch's tensors: DLTensors over arrays of this frame (the ops trim and
 * permute them; kvrt reads them only until it returns). */
typedef struct {
  DLTensor dl[MAX_TENSORS];
  int64_t shape[MAX_TENSORS][MAX_RANK];
  int64_t strides[MAX_TENSORS][MAX_RANK];
  const DLTensor *ptr[MAX_TENSORS]; /* NULL where absent */
} tensors;

/* The fast path's operations (the module's FAST_* constants) and the flags
 * of a table entry (F_*), which Python's remember() sets. */
enum { FAST_FLASH, FAST_PAGED, FAST_MLA, OPS_FAST };
enum {
  F_HND = 1,     /* caches are [nb, bs, H, D] views of HND memory */
  F_SCALES = 2,  /* pass the scale tensors (a quantized kernel) */
  F_STACKED = 4, /* paged: one [pages, 2, ...] tensor holds K and V */
};

/* kvrt's entry points, by kind, and kvrt_copy_blocks (kvext.c's init());
 * NULL where absent. */
extern void *kvext_entry[NUM_KINDS];
extern void *kvext_copy_entry;

/* One kvrt call of kind `kind` over the tensors of `t` (in its args struct's
 * order), the GIL released (kvrt may wait on the driver). */
kvrt_status kvext_call_kvrt(int kind, void *handle, const char *kernel,
                            int variant, void *stream, const tensors *t);

/* `o` as an address: None is NULL. -1 with a Python error otherwise. */
int kvext_as_pointer(PyObject *o, void **out);

/* Fills tensor `i` of `t` from a Python description (data, device_type,
 * device_id, code, bits, shape, strides; kvgen/_dlpack.py), or NULL for
 * None. -1 with a Python error otherwise. */
int kvext_from_desc(PyObject *d, tensors *t, int i);

/* The fast path's module functions (kvext_fast.c). */
PyObject *kvext_flash(PyObject *self, PyObject *args);
PyObject *kvext_paged(PyObject *self, PyObject *args);
PyObject *kvext_mla(PyObject *self, PyObject *args);
PyObject *kvext_remember(PyObject *self, PyObject *args);
PyObject *kvext_forget(PyObject *self, PyObject *unused);
PyObject *kvext_stats(PyObject *self, PyObject *unused);
PyObject *kvext_work_stream(PyObject *self, PyObject *args);
PyObject *kvext_copy_blocks(PyObject *self, PyObject *args); /* kvext_copy.c */

#endif /* KVGEN_PYTHON_SRC_KVEXT_H */
