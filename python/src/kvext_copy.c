/*===- kvext_copy.c - kvgen._kvext.copy_blocks: kvrt_copy_blocks ---------===*\
|*                                                                            *|
|* kvgen.copy_blocks (vLLM's swap_blocks calls it): the two caches and the    *|
|* block mapping, described in Python (kvgen/_dlpack.py) as for a launch,     *|
|* become DLTensors here and kvrt_copy_blocks' args struct is kvrt.h's own.   *|
|* The entry point is the one init() took from the libkvrt the package       *|
|* loaded, so that a libkvrt that predates it is named by Python rather than *|
|* crashing here.                                                             *|
\*===----------------------------------------------------------------------===*/

#include "kvext.h"

typedef kvrt_status (*copy_blocks_fn)(const kvrt_copy_blocks_args *,
                                      kvrt_stream);

/* copy_blocks(src, dst, block_bytes, block_mapping, stream) -> kvrt_status:
 * kvrt_copy_blocks, the GIL released (a device copy may wait on the
 * driver). */
PyObject *kvext_copy_blocks(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *src, *dst, *mapping, *stream;
  long long block_bytes;
  if (!PyArg_ParseTuple(args, "OOLOO", &src, &dst, &block_bytes, &mapping,
                        &stream))
    return NULL;
  void *s;
  if (kvext_as_pointer(stream, &s))
    return NULL;
  if (!kvext_copy_entry) {
    PyErr_SetString(PyExc_RuntimeError, "this libkvrt has no kvrt_copy_blocks");
    return NULL;
  }
  tensors t;
  if (kvext_from_desc(src, &t, 0) || kvext_from_desc(dst, &t, 1) ||
      kvext_from_desc(mapping, &t, 2))
    return NULL;
  kvrt_copy_blocks_args a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.src = t.ptr[0];
  a.dst = t.ptr[1];
  a.block_bytes = block_bytes;
  a.block_mapping = t.ptr[2];
  kvrt_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = ((copy_blocks_fn)kvext_copy_entry)(&a, s);
  Py_END_ALLOW_THREADS;
  return PyLong_FromLong(status);
}
