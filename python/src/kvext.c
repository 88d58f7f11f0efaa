/*===- kvext.c - kvgen._kvext: the package's launches, filled in C --------===*\
|*                                                                            *|
|* Every kvrt launch the Python package makes goes through here: the args     *|
|* structs are kvrt.h's own, filled field by field, so no layout is spelled   *|
|* a second time. Two ways in:                                                *|
|*                                                                            *|
|*  - launch(): tensors described in Python (kvgen/_dlpack.py, any           *|
|*    __dlpack__ producer) as plain tuples; this file builds the DLTensors.   *|
|*  - flash(), paged(), mla() (kvext_fast.c): the ops' repeated calls, their  *|
|*    tensors read through their type's DLPack C exchange API and the call   *|
|*    looked up in a table of signatures Python checked; a miss returns -1   *|
|*    and Python runs its checks, so every refusal stays in one place.        *|
|*                                                                            *|
|* kvrt's entry points come from the libkvrt the package loaded (init()), so  *|
|* the library search stays in kvgen/_paths.py. The CPython limited API      *|
|* (3.8): one abi3 file serves every CPython 3.8+.                            *|
\*===----------------------------------------------------------------------===*/

#include "kvext.h"

/* Every args struct is declared here: zeroed, with its struct_size set as
 * kvrt.h's KVRT_ARGS_INIT does, in one place. */
#define KVEXT_ARGS(type, var)                                                  \
  type var;                                                                    \
  memset(&var, 0, sizeof(var));                                                \
  var.struct_size = sizeof(var)

static const char *const OpNames[NUM_OPS] = {
    "kvrt_append",          "kvrt_fused_append", "kvrt_build_slot_mapping",
    "kvrt_gather",          "kvrt_mla_append",   "kvrt_mla_fused_append",
    "kvrt_paged_kv_append",
};

typedef kvrt_status (*append_fn)(kvrt_bundle *, const kvrt_append_args *,
                                 kvrt_stream);
typedef kvrt_status (*fused_fn)(kvrt_bundle *, const kvrt_fused_append_args *,
                                kvrt_stream);
typedef kvrt_status (*slot_fn)(kvrt_bundle *, const kvrt_slot_mapping_args *,
                               kvrt_stream);
typedef kvrt_status (*gather_fn)(kvrt_bundle *, const kvrt_gather_args *,
                                 kvrt_stream);
typedef kvrt_status (*mla_fn)(kvrt_bundle *, const kvrt_mla_append_args *,
                              kvrt_stream);
typedef kvrt_status (*mla_fused_fn)(kvrt_bundle *,
                                    const kvrt_mla_fused_append_args *,
                                    kvrt_stream);
typedef kvrt_status (*paged_fn)(kvrt_bundle *,
                                const kvrt_paged_kv_append_args *, kvrt_stream);

void *kvext_entry[NUM_OPS];

/* Any of kvrt.h's args structs. */
typedef union {
  kvrt_append_args append;
  kvrt_fused_append_args fused_append;
  kvrt_slot_mapping_args slot_mapping;
  kvrt_gather_args gather;
  kvrt_mla_append_args mla_append;
  kvrt_mla_fused_append_args mla_fused_append;
  kvrt_paged_kv_append_args paged_kv_append;
} any_args;

/* Fills op's args struct in `u` from the tensors `p` (kvrt.h's order, NULL
 * where absent); returns its size. */
static size_t fill_args(int op, const char *kernel, int variant,
                        const DLTensor *const *p, any_args *u) {
  kvrt_variant v = (kvrt_variant)variant;
  switch (op) {
  case OP_APPEND: {
    KVEXT_ARGS(kvrt_append_args, a);
    a.kernel = kernel;
    a.key = p[0], a.value = p[1], a.slot_mapping = p[2];
    a.key_cache = p[3], a.value_cache = p[4], a.variant = v;
    a.key_scale = p[5], a.value_scale = p[6];
    a.key_scale_cache = p[7], a.value_scale_cache = p[8];
    u->append = a;
    return sizeof(a);
  }
  case OP_FUSED_APPEND: {
    KVEXT_ARGS(kvrt_fused_append_args, a);
    a.kernel = kernel;
    a.key = p[0], a.value = p[1], a.block_table = p[2];
    a.query_start_loc = p[3], a.context_lens = p[4];
    a.key_cache = p[5], a.value_cache = p[6], a.variant = v;
    a.key_scale = p[7], a.value_scale = p[8];
    a.key_scale_cache = p[9], a.value_scale_cache = p[10];
    u->fused_append = a;
    return sizeof(a);
  }
  case OP_SLOT_MAPPING: {
    KVEXT_ARGS(kvrt_slot_mapping_args, a);
    a.kernel = kernel;
    a.block_table = p[0], a.query_start_loc = p[1], a.context_lens = p[2];
    a.slot_mapping = p[3];
    u->slot_mapping = a;
    return sizeof(a);
  }
  case OP_GATHER: {
    KVEXT_ARGS(kvrt_gather_args, a);
    a.kernel = kernel;
    a.key_cache = p[0], a.value_cache = p[1], a.slot_mapping = p[2];
    a.key_out = p[3], a.value_out = p[4], a.variant = v;
    a.key_scale = p[5], a.value_scale = p[6];
    a.key_scale_cache = p[7], a.value_scale_cache = p[8];
    u->gather = a;
    return sizeof(a);
  }
  case OP_MLA_APPEND: {
    KVEXT_ARGS(kvrt_mla_append_args, a);
    a.kernel = kernel;
    a.kv_c = p[0], a.k_pe = p[1], a.slot_mapping = p[2];
    a.key_cache = p[3], a.variant = v, a.key_scale = p[4];
    u->mla_append = a;
    return sizeof(a);
  }
  case OP_MLA_FUSED_APPEND: {
    KVEXT_ARGS(kvrt_mla_fused_append_args, a);
    a.kernel = kernel;
    a.kv_c = p[0], a.k_pe = p[1], a.block_table = p[2];
    a.query_start_loc = p[3], a.context_lens = p[4];
    a.key_cache = p[5], a.variant = v, a.key_scale = p[6];
    u->mla_fused_append = a;
    return sizeof(a);
  }
  case OP_PAGED_KV_APPEND: {
    KVEXT_ARGS(kvrt_paged_kv_append_args, a);
    a.kernel = kernel;
    a.key = p[0], a.value = p[1], a.batch_indices = p[2];
    a.positions = p[3], a.kv_indices = p[4], a.kv_indptr = p[5];
    a.key_cache = p[6], a.value_cache = p[7], a.variant = v;
    a.key_scale = p[8], a.value_scale = p[9];
    a.key_scale_cache = p[10], a.value_scale_cache = p[11];
    u->paged_kv_append = a;
    return sizeof(a);
  }
  }
  return 0;
}

/* One kvrt call, the GIL released (kvrt may wait on the driver). */
kvrt_status kvext_call_kvrt(int op, void *handle, const char *kernel,
                            int variant, void *stream, const tensors *t) {
  any_args u;
  fill_args(op, kernel, variant, t->ptr, &u);
  kvrt_bundle *b = (kvrt_bundle *)handle;
  void *fn = kvext_entry[op];
  kvrt_status status = KVRT_ERROR_INVALID_ARGUMENT;
  Py_BEGIN_ALLOW_THREADS;
  switch (op) {
  case OP_APPEND:
    status = ((append_fn)fn)(b, &u.append, stream);
    break;
  case OP_FUSED_APPEND:
    status = ((fused_fn)fn)(b, &u.fused_append, stream);
    break;
  case OP_SLOT_MAPPING:
    status = ((slot_fn)fn)(b, &u.slot_mapping, stream);
    break;
  case OP_GATHER:
    status = ((gather_fn)fn)(b, &u.gather, stream);
    break;
  case OP_MLA_APPEND:
    status = ((mla_fn)fn)(b, &u.mla_append, stream);
    break;
  case OP_MLA_FUSED_APPEND:
    status = ((mla_fused_fn)fn)(b, &u.mla_fused_append, stream);
    break;
  case OP_PAGED_KV_APPEND:
    status = ((paged_fn)fn)(b, &u.paged_kv_append, stream);
    break;
  }
  Py_END_ALLOW_THREADS;
  return status;
}

/* The number of tensors each operation's args struct takes. */
static const int OpTensors[NUM_OPS] = {9, 11, 4, 9, 5, 7, 12};

static int check_op(int op) {
  if (op < 0 || op >= NUM_OPS) {
    PyErr_Format(PyExc_ValueError, "kvgen._kvext: no operation %d", op);
    return -1;
  }
  if (!kvext_entry[op]) {
    PyErr_Format(PyExc_RuntimeError, "this libkvrt has no %s", OpNames[op]);
    return -1;
  }
  return 0;
}

int kvext_as_pointer(PyObject *o, void **out) {
  if (o == Py_None) {
    *out = NULL;
    return 0;
  }
  *out = PyLong_AsVoidPtr(o);
  return PyErr_Occurred() ? -1 : 0;
}

/* init(append, fused_append, build_slot_mapping, gather, mla_append,
 *      mla_fused_append, paged_kv_append): kvrt's entry points, as the
 * addresses of the loaded libkvrt's symbols (0 or None: absent). */
static PyObject *kvext_init(PyObject *self, PyObject *args) {
  (void)self;
  if (PyTuple_Size(args) != NUM_OPS) {
    PyErr_Format(PyExc_TypeError, "init: expected %d addresses", NUM_OPS);
    return NULL;
  }
  void *found[NUM_OPS];
  for (int i = 0; i < NUM_OPS; ++i)
    if (kvext_as_pointer(PyTuple_GetItem(args, i), &found[i]))
      return NULL;
  memcpy(kvext_entry, found, sizeof(kvext_entry));
  Py_RETURN_NONE;
}

/* Fills tensor `i` of `t` from a Python description (data, device_type,
 * device_id, code, bits, shape, strides), or NULL for None. */
static int from_desc(PyObject *d, tensors *t, int i) {
  if (d == Py_None) {
    t->ptr[i] = NULL;
    return 0;
  }
  if (!PyTuple_Check(d) || PyTuple_Size(d) != 7) {
    PyErr_SetString(PyExc_TypeError, "kvgen._kvext: a description is a "
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
  PyObject *s1 = PySequence_Fast(shape, "a shape is a sequence");
  if (!s1)
    return -1;
  PyObject *s2 = PySequence_Fast(strides, "strides are a sequence");
  if (!s2) {
    Py_DECREF(s1);
    return -1;
  }
  Py_ssize_t n = PySequence_Size(s1);
  int ok = n >= 0 && n <= MAX_RANK && PySequence_Size(s2) == n;
  for (Py_ssize_t k = 0; ok && k < n; ++k) {
    PyObject *e = PySequence_GetItem(s1, k), *s = PySequence_GetItem(s2, k);
    t->shape[i][k] = e ? PyLong_AsLongLong(e) : -1;
    t->strides[i][k] = s ? PyLong_AsLongLong(s) : -1;
    Py_XDECREF(e);
    Py_XDECREF(s);
    if (PyErr_Occurred())
      ok = 0;
  }
  Py_DECREF(s1);
  Py_DECREF(s2);
  if (!ok) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError,
                   "kvgen._kvext: a tensor of rank %zd (at most %d, shape and "
                   "strides of one rank)",
                   n, (int)MAX_RANK);
    return -1;
  }
  dl->ndim = (int)n;
  dl->shape = t->shape[i];
  dl->strides = t->strides[i];
  t->ptr[i] = dl;
  return 0;
}

/* launch(op, handle, kernel, variant, stream, descs) -> kvrt_status: one
 * launch of tensors described in Python (None where absent). */
static PyObject *kvext_launch(PyObject *self, PyObject *args) {
  (void)self;
  int op, variant;
  PyObject *handle, *kernel, *stream, *descs;
  if (!PyArg_ParseTuple(args, "iOOiOO!", &op, &handle, &kernel, &variant,
                        &stream, &PyTuple_Type, &descs))
    return NULL;
  if (check_op(op))
    return NULL;
  Py_ssize_t n = PyTuple_Size(descs);
  if (n > OpTensors[op]) {
    PyErr_Format(PyExc_ValueError, "%s takes %d tensors, got %zd", OpNames[op],
                 OpTensors[op], n);
    return NULL;
  }
  void *h, *s;
  if (kvext_as_pointer(handle, &h) || kvext_as_pointer(stream, &s))
    return NULL;
  const char *name = NULL;
  if (kernel != Py_None && !(name = PyBytes_AsString(kernel)))
    return NULL;
  tensors t;
  memset(t.ptr, 0, sizeof(t.ptr));
  for (Py_ssize_t i = 0; i < n; ++i)
    if (from_desc(PyTuple_GetItem(descs, i), &t, (int)i))
      return NULL;
  /* The objects the launch reads (the name) stay alive: `args` holds them. */
  return PyLong_FromLong(kvext_call_kvrt(op, h, name, variant, s, &t));
}

/* args_struct(op, kernel, variant, tensors) -> bytes: op's args struct as
 * kvrt.h lays it out, for scripts that call libkvrt through ctypes (see
 * kvgen.capi). `kernel` and `tensors` are addresses (a C string, DLTensors;
 * 0 or None where absent) that the caller keeps alive. */
static PyObject *kvext_args_struct(PyObject *self, PyObject *args) {
  (void)self;
  int op, variant;
  PyObject *kernel, *ptrs;
  if (!PyArg_ParseTuple(args, "iOiO!", &op, &kernel, &variant, &PyTuple_Type,
                        &ptrs))
    return NULL;
  if (op < 0 || op >= NUM_OPS) {
    PyErr_Format(PyExc_ValueError, "kvgen._kvext: no operation %d", op);
    return NULL;
  }
  Py_ssize_t n = PyTuple_Size(ptrs);
  if (n > OpTensors[op]) {
    PyErr_Format(PyExc_ValueError, "%s takes %d tensors, got %zd", OpNames[op],
                 OpTensors[op], n);
    return NULL;
  }
  const DLTensor *p[MAX_TENSORS] = {0};
  void *name, *x;
  if (kvext_as_pointer(kernel, &name))
    return NULL;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (kvext_as_pointer(PyTuple_GetItem(ptrs, i), &x))
      return NULL;
    p[i] = (const DLTensor *)x;
  }
  any_args u;
  size_t size = fill_args(op, (const char *)name, variant, p, &u);
  return PyBytes_FromStringAndSize((const char *)&u, (Py_ssize_t)size);
}

static PyMethodDef Methods[] = {
    {"init", kvext_init, METH_VARARGS, "kvrt's entry points"},
    {"launch", kvext_launch, METH_VARARGS, "a launch of described tensors"},
    {"flash", kvext_flash, METH_VARARGS, "reshape_and_cache_flash, fast"},
    {"paged", kvext_paged, METH_VARARGS, "append_paged_kv_cache, fast"},
    {"mla", kvext_mla, METH_VARARGS, "concat_and_cache_mla, fast"},
    {"remember", kvext_remember, METH_VARARGS, "a checked call's signature"},
    {"forget", kvext_forget, METH_NOARGS, "empties the call tables"},
    {"stats", kvext_stats, METH_NOARGS, "fast-path hits"},
    {"work_stream", kvext_work_stream, METH_VARARGS, "the current stream"},
    {"args_struct", kvext_args_struct, METH_VARARGS, "an args struct"},
    {"copy_blocks", kvext_copy_blocks, METH_VARARGS, "kvrt_copy_blocks"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef Module = {
    PyModuleDef_HEAD_INIT,
    "_kvext",
    "kvgen's launches: kvrt.h's args structs filled in C",
    -1,
    Methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__kvext(void) {
  PyObject *m = PyModule_Create(&Module);
  if (!m)
    return NULL;
  /* The operation numbers launch() takes and the flags remember() takes. */
  static const struct {
    const char *name;
    long value;
  } Constants[] = {
      {"APPEND", OP_APPEND},
      {"FUSED_APPEND", OP_FUSED_APPEND},
      {"SLOT_MAPPING", OP_SLOT_MAPPING},
      {"GATHER", OP_GATHER},
      {"MLA_APPEND", OP_MLA_APPEND},
      {"MLA_FUSED_APPEND", OP_MLA_FUSED_APPEND},
      {"PAGED_KV_APPEND", OP_PAGED_KV_APPEND},
      {"FAST_FLASH", FAST_FLASH},
      {"FAST_PAGED", FAST_PAGED},
      {"FAST_MLA", FAST_MLA},
      {"F_HND", F_HND},
      {"F_SCALES", F_SCALES},
      {"F_STACKED", F_STACKED},
  };
  for (size_t i = 0; i < sizeof(Constants) / sizeof(Constants[0]); ++i)
    if (PyModule_AddIntConstant(m, Constants[i].name, Constants[i].value)) {
      Py_DECREF(m);
      return NULL;
    }
  return m;
}
