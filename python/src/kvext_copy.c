/*===- kvext_copy.c - kvgen._kvext.copy_blocks: kvrt_copy_blocks ---------===*\
|*                                                                            *|
|* vLLM's swap_blocks (kvgen.vllm.swap_blocks): the two caches and the block  *|
|* mapping, described in Python (kvgen/_dlpack.py), become DLTensors here and *|
|* kvrt_copy_blocks' args struct is kvrt.h's own. The entry point is passed  *|
|* by address, from the libkvrt the package loaded, so that a libkvrt that   *|
|* predates it is named by Python rather than crashing here.                 *|
\*===----------------------------------------------------------------------===*/

#include "kvext.h"

typedef kvrt_status (*copy_blocks_fn)(const kvrt_copy_blocks_args *,
                                      kvrt_stream);

/* A description (data, device_type, device_id, code, bits, shape, strides)
 * as tensor `i` of `t`. Any rank up to MAX_RANK. */
static int describe(PyObject *d, tensors *t, int i) {
  if (!PyTuple_Check(d) || PyTuple_Size(d) != 7) {
    PyErr_SetString(PyExc_TypeError, "copy_blocks: a description is a "
                                     "7-tuple");
    return -1;
  }
  DLTensor *dl = &t->dl[i];
  memset(dl, 0, sizeof(*dl));
  dl->data =
      (void *)(uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GetItem(d, 0));
  dl->device.device_type = (DLDeviceType)PyLong_AsLong(PyTuple_GetItem(d, 1));
  dl->device.device_id = (int)PyLong_AsLong(PyTuple_GetItem(d, 2));
  dl->dtype.code = (uint8_t)PyLong_AsLong(PyTuple_GetItem(d, 3));
  dl->dtype.bits = (uint8_t)PyLong_AsLong(PyTuple_GetItem(d, 4));
  dl->dtype.lanes = 1;
  if (PyErr_Occurred())
    return -1;
  PyObject *shape = PyTuple_GetItem(d, 5), *strides = PyTuple_GetItem(d, 6);
  if (!PyTuple_Check(shape) || !PyTuple_Check(strides) ||
      PyTuple_Size(shape) != PyTuple_Size(strides) ||
      PyTuple_Size(shape) > MAX_RANK) {
    PyErr_Format(PyExc_ValueError,
                 "copy_blocks: shape and strides are tuples of one rank, at "
                 "most %d",
                 (int)MAX_RANK);
    return -1;
  }
  Py_ssize_t n = PyTuple_Size(shape);
  for (Py_ssize_t k = 0; k < n; ++k) {
    t->shape[i][k] = PyLong_AsLongLong(PyTuple_GetItem(shape, k));
    t->strides[i][k] = PyLong_AsLongLong(PyTuple_GetItem(strides, k));
  }
  if (PyErr_Occurred())
    return -1;
  dl->ndim = (int)n;
  dl->shape = t->shape[i];
  dl->strides = t->strides[i];
  t->ptr[i] = dl;
  return 0;
}

/* copy_blocks(entry, src, dst, block_bytes, block_mapping, stream) ->
 * kvrt_status: kvrt_copy_blocks at address `entry`, the GIL released (a
 * device copy may wait on the driver). */
PyObject *kvext_copy_blocks(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *entry, *src, *dst, *mapping, *stream;
  long long block_bytes;
  if (!PyArg_ParseTuple(args, "OOOLOO", &entry, &src, &dst, &block_bytes,
                        &mapping, &stream))
    return NULL;
  void *fn, *s;
  if (kvext_as_pointer(entry, &fn) || kvext_as_pointer(stream, &s))
    return NULL;
  if (!fn) {
    PyErr_SetString(PyExc_ValueError, "copy_blocks: no kvrt_copy_blocks");
    return NULL;
  }
  tensors t;
  if (describe(src, &t, 0) || describe(dst, &t, 1) || describe(mapping, &t, 2))
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
  status = ((copy_blocks_fn)fn)(&a, s);
  Py_END_ALLOW_THREADS;
  return PyLong_FromLong(status);
}
