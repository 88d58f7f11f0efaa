/*===- kvext.c - kvgen._kvext: the package's launches, filled in C --------===*\
|*                                                                            *|
|* Every kvrt launch the Python package makes goes through here: the args     *|
|* structs are kvrt.h's own, filled at the offsets of the fields its kind    *|
|* lists name (KVRT_FOR_EACH_KIND_TENSOR), so no layout is spelled a second   *|
|* time and no kind is named. KINDS tells Python each kind's traits, tensors  *|
|* and parameters (include/kvgen/ABI/*.def). Two ways in:                     *|
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

/* The launches, made from kvrt.h's lists (KVRT_FOR_EACH_KIND and
 * KVRT_FOR_EACH_KIND_TENSOR), so that a new kind needs nothing here: for
 * each kind, its entry point, its args struct's size and the offsets of its
 * fields. */

/* The args structs, in KVRT_FOR_EACH_KIND's order. */
enum {
#define KVEXT_STRUCT(Kind, Struct, FirstSize, Entry, HasVariant) ARGS_##Struct,
  KVRT_FOR_EACH_KIND(KVEXT_STRUCT)
#undef KVEXT_STRUCT
      NUM_ARGS,
};

/* Any of kvrt.h's args structs. */
typedef union {
#define KVEXT_MEMBER(Kind, Struct, FirstSize, Entry, HasVariant) Struct Kind;
  KVRT_FOR_EACH_KIND(KVEXT_MEMBER)
#undef KVEXT_MEMBER
} any_args;

#define KVEXT_VARIANT_Variant(Struct) ((long)offsetof(Struct, variant))
#define KVEXT_VARIANT_NoVariant(Struct) (-1L)

typedef struct {
  int kind;           /* KIND_* */
  const char *entry;  /* kvrt's entry point */
  size_t size;        /* sizeof the struct, its struct_size */
  size_t struct_size; /* the offsets of its fields */
  size_t kernel;
  long variant; /* -1: the struct has none */
} args_info;

static const args_info Structs[NUM_ARGS] = {
#define KVEXT_ARGS_INFO(Kind, Struct, FirstSize, Entry, HasVariant)            \
  {KIND_##Kind,                                                                \
   #Entry,                                                                     \
   sizeof(Struct),                                                             \
   offsetof(Struct, struct_size),                                              \
   offsetof(Struct, kernel),                                                   \
   KVEXT_VARIANT_##HasVariant(Struct)},
    KVRT_FOR_EACH_KIND(KVEXT_ARGS_INFO)
#undef KVEXT_ARGS_INFO
};

static const struct {
  int args; /* ARGS_* */
  const char *name;
  size_t offset;
} Tensors[] = {
#define KVEXT_TENSOR(Struct, Field, Param)                                     \
  {ARGS_##Struct, #Field, offsetof(Struct, Field)},
    KVRT_FOR_EACH_KIND_TENSOR(KVEXT_TENSOR)
#undef KVEXT_TENSOR
};

/* Each kind's launch (kvrt has one for every kind of KernelKinds.def;
 * an older kvrt.h's lack of one is refused at import). */
typedef struct {
  const args_info *args;
  int num_tensors;
  size_t offset[MAX_TENSORS];
  const char *name[MAX_TENSORS];
} kind_launch;

static kind_launch Kinds[NUM_KINDS];

static const char *const KindNames[NUM_KINDS] = {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry) Name,
#include <kvgen/ABI/KernelKinds.def>
};

/* Fills Kinds from the tables above; -1 with a Python error where kvrt.h
 * and KernelKinds.def disagree. */
static int build_kinds(void) {
  for (int a = 0; a < NUM_ARGS; ++a)
    Kinds[Structs[a].kind].args = &Structs[a];
  for (size_t i = 0; i < sizeof(Tensors) / sizeof(Tensors[0]); ++i) {
    kind_launch *k = &Kinds[Structs[Tensors[i].args].kind];
    if (k->num_tensors == MAX_TENSORS) {
      PyErr_Format(PyExc_SystemError,
                   "kvgen._kvext: %s has more than %d tensors", k->args->entry,
                   (int)MAX_TENSORS);
      return -1;
    }
    k->offset[k->num_tensors] = Tensors[i].offset;
    k->name[k->num_tensors++] = Tensors[i].name;
  }
  for (int k = 0; k < NUM_KINDS; ++k)
    if (!Kinds[k].args) {
      PyErr_Format(PyExc_SystemError,
                   "kvgen._kvext: kvrt.h has no launch of kind %s",
                   KindNames[k]);
      return -1;
    }
  return 0;
}

void *kvext_entry[NUM_KINDS];
void *kvext_copy_entry;

/* Fills kind's args struct in `u` from the tensors `p` (its struct's order,
 * NULL where absent), as KVRT_ARGS_INIT would start it; returns its size. */
static size_t fill_args(int kind, const char *kernel, int variant,
                        const DLTensor *const *p, any_args *u) {
  const kind_launch *k = &Kinds[kind];
  char *base = (char *)u;
  size_t size = k->args->size;
  kvrt_variant v = (kvrt_variant)variant;
  memset(u, 0, sizeof(*u));
  memcpy(base + k->args->struct_size, &size, sizeof(size));
  memcpy(base + k->args->kernel, &kernel, sizeof(kernel));
  if (k->args->variant >= 0)
    memcpy(base + k->args->variant, &v, sizeof(v));
  for (int i = 0; i < k->num_tensors; ++i)
    memcpy(base + k->offset[i], &p[i], sizeof(p[i]));
  return size;
}

/* One kvrt call, the GIL released (kvrt may wait on the driver). */
kvrt_status kvext_call_kvrt(int kind, void *handle, const char *kernel,
                            int variant, void *stream, const tensors *t) {
  any_args u;
  fill_args(kind, kernel, variant, t->ptr, &u);
  kvrt_bundle *b = (kvrt_bundle *)handle;
  void *fn = kvext_entry[kind];
  kvrt_status status = KVRT_ERROR_INVALID_ARGUMENT;
  Py_BEGIN_ALLOW_THREADS;
  switch (kind) {
#define KVEXT_CALL(Kind, Struct, FirstSize, Entry, HasVariant)                 \
  case KIND_##Kind:                                                            \
    status = ((kvrt_status (*)(kvrt_bundle *, const Struct *,                  \
                               kvrt_stream))fn)(b, &u.Kind, stream);           \
    break;
    KVRT_FOR_EACH_KIND(KVEXT_CALL)
#undef KVEXT_CALL
  }
  Py_END_ALLOW_THREADS;
  return status;
}

static int check_kind(int kind) {
  if (kind < 0 || kind >= NUM_KINDS) {
    PyErr_Format(PyExc_ValueError, "kvgen._kvext: no kind %d", kind);
    return -1;
  }
  return 0;
}

/* -1 with a Python error where `n` tensors are too many for `kind`. */
static int check_count(int kind, Py_ssize_t n) {
  if (n > Kinds[kind].num_tensors) {
    PyErr_Format(PyExc_ValueError, "%s takes %d tensors, got %zd",
                 Kinds[kind].args->entry, Kinds[kind].num_tensors, n);
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

/* init(*addresses): kvrt's entry points, one per kind in KINDS' order, then
 * kvrt_copy_blocks, as the addresses of the loaded libkvrt's symbols (0 or
 * None: absent). */
static PyObject *kvext_init(PyObject *self, PyObject *args) {
  (void)self;
  if (PyTuple_Size(args) != NUM_KINDS + 1) {
    PyErr_Format(PyExc_TypeError, "init: expected %d addresses", NUM_KINDS + 1);
    return NULL;
  }
  void *found[NUM_KINDS + 1];
  for (int i = 0; i < NUM_KINDS + 1; ++i)
    if (kvext_as_pointer(PyTuple_GetItem(args, i), &found[i]))
      return NULL;
  memcpy(kvext_entry, found, sizeof(kvext_entry));
  kvext_copy_entry = found[NUM_KINDS];
  Py_RETURN_NONE;
}

int kvext_from_desc(PyObject *d, tensors *t, int i) {
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

/* launch(kind, handle, kernel, variant, stream, descs) -> kvrt_status: one
 * launch of tensors described in Python (None where absent). */
static PyObject *kvext_launch(PyObject *self, PyObject *args) {
  (void)self;
  int kind, variant;
  PyObject *handle, *kernel, *stream, *descs;
  if (!PyArg_ParseTuple(args, "iOOiOO!", &kind, &handle, &kernel, &variant,
                        &stream, &PyTuple_Type, &descs))
    return NULL;
  if (check_kind(kind))
    return NULL;
  if (!kvext_entry[kind]) {
    PyErr_Format(PyExc_RuntimeError, "this libkvrt has no %s",
                 Kinds[kind].args->entry);
    return NULL;
  }
  Py_ssize_t n = PyTuple_Size(descs);
  if (check_count(kind, n))
    return NULL;
  void *h, *s;
  if (kvext_as_pointer(handle, &h) || kvext_as_pointer(stream, &s))
    return NULL;
  const char *name = NULL;
  if (kernel != Py_None && !(name = PyBytes_AsString(kernel)))
    return NULL;
  tensors t;
  memset(t.ptr, 0, sizeof(t.ptr));
  for (Py_ssize_t i = 0; i < n; ++i)
    if (kvext_from_desc(PyTuple_GetItem(descs, i), &t, (int)i))
      return NULL;
  /* The objects the launch reads (the name) stay alive: `args` holds them. */
  return PyLong_FromLong(kvext_call_kvrt(kind, h, name, variant, s, &t));
}

/* args_struct(kind, kernel, variant, tensors) -> bytes: kind's args struct
 * as kvrt.h lays it out, for scripts that call libkvrt through ctypes (see
 * kvgen.capi). `kernel` and `tensors` are addresses (a C string, DLTensors;
 * 0 or None where absent) that the caller keeps alive. */
static PyObject *kvext_args_struct(PyObject *self, PyObject *args) {
  (void)self;
  int kind, variant;
  PyObject *kernel, *ptrs;
  if (!PyArg_ParseTuple(args, "iOiO!", &kind, &kernel, &variant, &PyTuple_Type,
                        &ptrs))
    return NULL;
  if (check_kind(kind))
    return NULL;
  Py_ssize_t n = PyTuple_Size(ptrs);
  if (check_count(kind, n))
    return NULL;
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
  size_t size = fill_args(kind, (const char *)name, variant, p, &u);
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

/* The ABI's parameters (include/kvgen/ABI/Params.def): what the package
 * asks of a kind's tensors (which are optional, which it writes). */
enum {
#define KVGEN_ABI_PARAM(Id, Name, Role, Element) PARAM_##Id,
#include <kvgen/ABI/Params.def>
  NUM_PARAMS,
};

static const struct {
  const char *name, *role;
} Params[NUM_PARAMS] = {
#define KVGEN_ABI_PARAM(Id, Name, Role, Element) {Name, #Role},
#include <kvgen/ABI/Params.def>
};

static const struct {
  int kind, param;
  const char *when;
} KindParams[] = {
#define KVGEN_ABI_KERNEL_PARAM(Kind, Id, When) {KIND_##Kind, PARAM_##Id, #When},
#include <kvgen/ABI/Params.def>
};

static const struct {
  int kind, param;
} KindWrites[] = {
#define KVGEN_ABI_KERNEL_WRITES(Kind, Id) {KIND_##Kind, PARAM_##Id},
#include <kvgen/ABI/Params.def>
};

static const struct {
  const char *rows, *slot, *entry;
} Traits[NUM_KINDS] = {
#define KVGEN_ABI_KERNEL_KIND(Id, Name, Rows, Slot, Entry)                     \
  {#Rows, #Slot, #Entry},
#include <kvgen/ABI/KernelKinds.def>
};

/* KINDS: for each kind, in KernelKinds.def's order, (name, rows, slot,
 * entry, entry point, has a variant, its args struct's tensors in order,
 * its parameters as (name, role, when) in ABI order, the buffers it
 * writes). The package builds its launches from it (kvgen/_kinds.py). */
static PyObject *kinds_table(void) {
  PyObject *all = PyTuple_New(NUM_KINDS);
  for (int k = 0; all && k < NUM_KINDS; ++k) {
    const kind_launch *l = &Kinds[k];
    PyObject *tensors = PyTuple_New(l->num_tensors);
    for (int i = 0; tensors && i < l->num_tensors; ++i)
      PyTuple_SetItem(tensors, i, PyUnicode_FromString(l->name[i]));
    PyObject *params = PyList_New(0), *writes = PyList_New(0);
    for (size_t i = 0; params && i < sizeof(KindParams) / sizeof(KindParams[0]);
         ++i) {
      if (KindParams[i].kind != k)
        continue;
      PyObject *row =
          Py_BuildValue("(sss)", Params[KindParams[i].param].name,
                        Params[KindParams[i].param].role, KindParams[i].when);
      if (!row || PyList_Append(params, row)) {
        Py_XDECREF(row);
        Py_CLEAR(params);
        break;
      }
      Py_DECREF(row);
    }
    for (size_t i = 0; writes && i < sizeof(KindWrites) / sizeof(KindWrites[0]);
         ++i) {
      if (KindWrites[i].kind != k)
        continue;
      PyObject *name = PyUnicode_FromString(Params[KindWrites[i].param].name);
      if (!name || PyList_Append(writes, name)) {
        Py_XDECREF(name);
        Py_CLEAR(writes);
        break;
      }
      Py_DECREF(name);
    }
    PyObject *row = NULL;
    if (tensors && params && writes && !PyErr_Occurred())
      row = Py_BuildValue("(sssssOOOO)", KindNames[k], Traits[k].rows,
                          Traits[k].slot, Traits[k].entry, l->args->entry,
                          l->args->variant >= 0 ? Py_True : Py_False, tensors,
                          params, writes);
    Py_XDECREF(tensors);
    Py_XDECREF(params);
    Py_XDECREF(writes);
    if (!row) {
      Py_DECREF(all);
      return NULL;
    }
    PyTuple_SetItem(all, k, row);
  }
  return all;
}

PyMODINIT_FUNC PyInit__kvext(void) {
  if (build_kinds())
    return NULL;
  PyObject *m = PyModule_Create(&Module);
  if (!m)
    return NULL;
  PyObject *kinds = kinds_table();
  if (!kinds || PyModule_AddObject(m, "KINDS", kinds)) {
    Py_XDECREF(kinds);
    Py_DECREF(m);
    return NULL;
  }
  /* The flags remember() takes. */
  static const struct {
    const char *name;
    long value;
  } Constants[] = {
      {"FAST_FLASH", FAST_FLASH}, {"FAST_PAGED", FAST_PAGED},
      {"FAST_MLA", FAST_MLA},     {"F_HND", F_HND},
      {"F_SCALES", F_SCALES},     {"F_STACKED", F_STACKED},
  };
  for (size_t i = 0; i < sizeof(Constants) / sizeof(Constants[0]); ++i)
    if (PyModule_AddIntConstant(m, Constants[i].name, Constants[i].value)) {
      Py_DECREF(m);
      return NULL;
    }
  return m;
}
