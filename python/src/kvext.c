/*===- kvext.c - kvgen._kvext: the package's launches, filled in C --------===*\
|*                                                                            *|
|* Every kvrt launch the Python package makes goes through here: the args     *|
|* structs are kvrt.h's own, filled field by field, so no layout is spelled   *|
|* a second time. Two ways in:                                                *|
|*                                                                            *|
|*  - launch(): tensors described in Python (kvgen/_dlpack.py, any           *|
|*    __dlpack__ producer) as plain tuples; this file builds the DLTensors.   *|
|*  - flash(), paged(), mla(): the ops' repeated calls. Each tensor is read   *|
|*    through its type's DLPack C exchange API (DLPack 1.3,                   *|
|*    type(t).__dlpack_c_exchange_api__), and the call's signature (types,    *|
|*    devices, dtypes, shapes but the token count, strides, the string       *|
|*    arguments) is looked up in a table that Python fills after its checks   *|
|*    passed. A hit launches; a miss returns -1 and Python runs its checks,   *|
|*    so every refusal and its message stays in one place.                    *|
|*                                                                            *|
|* kvrt's entry points come from the libkvrt the package loaded (init()), so  *|
|* the library search stays in kvgen/_paths.py. The CPython limited API      *|
|* (3.8): one abi3 file serves every CPython 3.8+.                            *|
\*===----------------------------------------------------------------------===*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <kvrt/kvrt.h>

#include <stdint.h>
#include <string.h>

/* Every args struct is declared here: zeroed, with its struct_size set as
 * kvrt.h's KVRT_ARGS_INIT does, in one place. */
#define KVEXT_ARGS(type, var)                                                  \
  type var;                                                                    \
  memset(&var, 0, sizeof(var));                                                \
  var.struct_size = sizeof(var)

enum {
  MAX_RANK = 5,
  MAX_TENSORS = 12,
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

/* The operations, in the order of init()'s arguments. */
enum {
  OP_APPEND,
  OP_FUSED_APPEND,
  OP_SLOT_MAPPING,
  OP_GATHER,
  OP_MLA_APPEND,
  OP_MLA_FUSED_APPEND,
  OP_PAGED_KV_APPEND,
  NUM_OPS,
};

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

static void *Entry[NUM_OPS];

/* A launch's tensors: DLTensors over arrays of this frame (the ops trim and
 * permute them; kvrt reads them only until it returns). */
typedef struct {
  DLTensor dl[MAX_TENSORS];
  int64_t shape[MAX_TENSORS][MAX_RANK];
  int64_t strides[MAX_TENSORS][MAX_RANK];
  const DLTensor *ptr[MAX_TENSORS]; /* NULL where absent */
} tensors;

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
static kvrt_status call_kvrt(int op, void *handle, const char *kernel,
                             int variant, void *stream, const tensors *t) {
  any_args u;
  fill_args(op, kernel, variant, t->ptr, &u);
  kvrt_bundle *b = (kvrt_bundle *)handle;
  void *fn = Entry[op];
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
  if (!Entry[op]) {
    PyErr_Format(PyExc_RuntimeError, "this libkvrt has no %s", OpNames[op]);
    return -1;
  }
  return 0;
}

static int as_pointer(PyObject *o, void **out) {
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
    if (as_pointer(PyTuple_GetItem(args, i), &found[i]))
      return NULL;
  memcpy(Entry, found, sizeof(Entry));
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
  if (as_pointer(handle, &h) || as_pointer(stream, &s))
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
  return PyLong_FromLong(call_kvrt(op, h, name, variant, s, &t));
}

/* ---- The ops' fast path --------------------------------------------------
 *
 * A tensor's signature: what Python's checks and its choice of kernel read
 * of it. The token dimension (dim 0 of the "free" tensors) is left out: the
 * ops check it against the slot count here, as Python does. */

typedef struct {
  PyTypeObject *type; /* NULL: None */
  int32_t device_type, device_id;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t shape[MAX_RANK];
  int64_t strides[MAX_RANK];
} signature;

/* Flags of a table entry, set by Python's remember(). */
enum {
  F_HND = 1,     /* caches are [nb, bs, H, D] views of HND memory */
  F_SCALES = 2,  /* pass the scale tensors (a quantized kernel) */
  F_STACKED = 4, /* paged: one [pages, 2, ...] tensor holds K and V */
};

enum { OPS_FAST = 3 };
enum { FAST_FLASH, FAST_PAGED, FAST_MLA };

typedef struct {
  int used;
  PyObject *bundle; /* owned: keeps the kvrt bundle (and its host code) */
  void *handle;
  PyObject *kernel; /* owned bytes */
  PyObject *text;   /* owned str: kv_cache_dtype or kv_layout */
  int flags;
  signature sig[MAX_TENSORS];
} entry;

static entry Table[OPS_FAST][TABLE_ENTRIES];
static int TableNext[OPS_FAST];
static unsigned long long Hits[OPS_FAST];

static struct {
  PyTypeObject *type;
  PyObject *owner; /* the capsule or int that holds the table */
  const kvext_exchange_api *api;
} Types[MAX_TYPES];
static int NumTypes;

static const kvext_exchange_api *api_of(PyTypeObject *type) {
  for (int i = 0; i < NumTypes; ++i)
    if (Types[i].type == type)
      return Types[i].api;
  return NULL;
}

/* The exchange API of `type`, registered on first use; NULL (no error set)
 * for a type without one or of another DLPack major version. */
static const kvext_exchange_api *learn_api(PyTypeObject *type) {
  const kvext_exchange_api *api = api_of(type);
  if (api || NumTypes == MAX_TYPES)
    return api;
  PyObject *o =
      PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
  if (o && PyCapsule_IsValid(o, "dlpack_exchange_api")) {
    api = (const kvext_exchange_api *)PyCapsule_GetPointer(
        o, "dlpack_exchange_api");
  } else {
    /* torch 2.9-2.10 named it __c_dlpack_exchange_api__, an address. */
    Py_XDECREF(o);
    PyErr_Clear();
    o = PyObject_GetAttrString((PyObject *)type, "__c_dlpack_exchange_api__");
    if (o && PyLong_Check(o))
      api = (const kvext_exchange_api *)PyLong_AsVoidPtr(o);
  }
  PyErr_Clear();
  if (!api || api->version.major != 1 ||
      !api->dltensor_from_py_object_no_sync || !api->current_work_stream) {
    Py_XDECREF(o);
    return NULL;
  }
  Py_INCREF((PyObject *)type);
  Types[NumTypes].type = type;
  Types[NumTypes].owner = o;
  Types[NumTypes].api = api;
  ++NumTypes;
  return api;
}

/* Reads `obj` into tensor `i` of `t` and its signature; `free0` leaves the
 * token dimension out of the signature. 0: read (or None), -1: a type
 * without a known exchange API or a refusal (no Python error left set). */
static int read_tensor(PyObject *obj, tensors *t, int i, signature *sig,
                       int free0, int learn) {
  memset(sig, 0, sizeof(*sig));
  if (obj == Py_None) {
    t->ptr[i] = NULL;
    return 0;
  }
  PyTypeObject *type = Py_TYPE(obj);
  const kvext_exchange_api *api = learn ? learn_api(type) : api_of(type);
  if (!api)
    return -1;
  DLTensor *dl = &t->dl[i];
  if (api->dltensor_from_py_object_no_sync(obj, dl)) {
    PyErr_Clear();
    return -1;
  }
  int n = dl->ndim;
  if (n < 0 || n > MAX_RANK || dl->dtype.lanes != 1 || (n && !dl->shape))
    return -1;
  int64_t acc = 1;
  for (int k = n - 1; k >= 0; --k) {
    t->shape[i][k] = dl->shape[k];
    t->strides[i][k] = dl->strides ? dl->strides[k] : acc;
    acc *= dl->shape[k];
  }
  dl->data = (char *)dl->data + dl->byte_offset;
  dl->byte_offset = 0;
  dl->shape = t->shape[i];
  dl->strides = t->strides[i];
  t->ptr[i] = dl;
  sig->type = type;
  sig->device_type = dl->device.device_type;
  sig->device_id = dl->device.device_id;
  sig->ndim = n;
  sig->code = dl->dtype.code;
  sig->bits = dl->dtype.bits;
  sig->lanes = dl->dtype.lanes;
  memcpy(sig->shape, t->shape[i], sizeof(int64_t) * n);
  memcpy(sig->strides, t->strides[i], sizeof(int64_t) * n);
  if (free0 && n)
    sig->shape[0] = 0;
  return 0;
}

static int same_text(PyObject *a, PyObject *b) {
  if (a == b)
    return 1;
  if (!PyUnicode_Check(b))
    return 0;
  int r = PyUnicode_Compare(a, b);
  if (r == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return r == 0;
}

static entry *find(int fast, PyObject *text, const signature *sig, int count) {
  for (int e = 0; e < TABLE_ENTRIES; ++e) {
    entry *x = &Table[fast][e];
    if (x->used && !memcmp(x->sig, sig, sizeof(signature) * count) &&
        same_text(x->text, text))
      return x;
  }
  return NULL;
}

/* The tensors of each fast operation, in its Python signature's order. */
static const int FastCount[OPS_FAST] = {7, 8, 5};
/* Which of them have a free token dimension. */
static const int FastFree[OPS_FAST][MAX_TENSORS] = {
    /* key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale */
    {1, 1, 0, 0, 1, 0, 0},
    /* key, value, batch_indices, positions, paged_kv_cache (or K), V,
     * kv_indices, kv_indptr */
    {1, 1, 1, 1, 0, 0, 1, 1},
    /* kv_c, k_pe, kv_cache, slot_mapping, scale */
    {1, 1, 0, 1, 0},
};

/* Reads the fast operation's tensors: `objs` in its Python order. */
static int read_all(int fast, PyObject *const *objs, tensors *t, signature *sig,
                    int learn) {
  for (int i = 0; i < FastCount[fast]; ++i)
    if (read_tensor(objs[i], t, i, &sig[i], FastFree[fast][i], learn))
      return -1;
  return 0;
}

static void set_rows(tensors *t, int i, int64_t rows) { t->shape[i][0] = rows; }

static void hnd_view(tensors *t, int i) {
  int64_t *s = t->shape[i], *st = t->strides[i], x;
  x = s[1], s[1] = s[2], s[2] = x;
  x = st[1], st[1] = st[2], st[2] = x;
}

static void squeeze(tensors *t, int i) {
  if (!t->ptr[i])
    return;
  int64_t count = 1;
  for (int k = 0; k < t->dl[i].ndim; ++k)
    count *= t->shape[i][k];
  if (count == 1) {
    t->dl[i].ndim = 1;
    t->shape[i][0] = 1;
    t->strides[i][0] = 1;
  }
}

/* Splits tensor `i`, [pages, 2, ...], into K (at i) and V (at i + 1). */
static void split_stacked(tensors *t, int i) {
  DLTensor *k = &t->dl[i], *v = &t->dl[i + 1];
  int n = k->ndim;
  int64_t kv_stride = t->strides[i][1];
  for (int d = 1; d + 1 < n; ++d) {
    t->shape[i][d] = t->shape[i][d + 1];
    t->strides[i][d] = t->strides[i][d + 1];
  }
  k->ndim = n - 1;
  *v = *k;
  memcpy(t->shape[i + 1], t->shape[i], sizeof(t->shape[i]));
  memcpy(t->strides[i + 1], t->strides[i], sizeof(t->strides[i]));
  v->shape = t->shape[i + 1];
  v->strides = t->strides[i + 1];
  v->data = (char *)k->data + kv_stride * (k->dtype.bits / 8);
  t->ptr[i + 1] = v;
}

/* Unpacks the fast operation's arguments: its tensors into `objs`, its text
 * argument into `*text`. Paged: a (K, V) pair or one stacked tensor. */
static int unpack(int fast, PyObject *args, PyObject **objs, PyObject **text,
                  int *stacked) {
  Py_ssize_t n = PyTuple_Size(args);
  *stacked = 0;
  switch (fast) {
  case FAST_FLASH: /* key, value, kc, vc, sm, kv_cache_dtype, ks, vs */
    if (n != 8)
      return -1;
    for (int i = 0; i < 5; ++i)
      objs[i] = PyTuple_GetItem(args, i);
    *text = PyTuple_GetItem(args, 5);
    objs[5] = PyTuple_GetItem(args, 6);
    objs[6] = PyTuple_GetItem(args, 7);
    return 0;
  case FAST_PAGED: { /* k, v, bi, pos, paged_kv_cache, kvi, kvp, layout */
    if (n != 8)
      return -1;
    for (int i = 0; i < 4; ++i)
      objs[i] = PyTuple_GetItem(args, i);
    PyObject *cache = PyTuple_GetItem(args, 4);
    if (PyTuple_Check(cache) && PyTuple_Size(cache) == 2) {
      objs[4] = PyTuple_GetItem(cache, 0);
      objs[5] = PyTuple_GetItem(cache, 1);
    } else if (PyList_Check(cache) && PyList_Size(cache) == 2) {
      objs[4] = PyList_GetItem(cache, 0);
      objs[5] = PyList_GetItem(cache, 1);
    } else {
      objs[4] = cache;
      objs[5] = Py_None;
      *stacked = 1;
    }
    if (objs[4] == Py_None)
      return -1;
    objs[6] = PyTuple_GetItem(args, 5);
    objs[7] = PyTuple_GetItem(args, 6);
    *text = PyTuple_GetItem(args, 7);
    return 0;
  }
  case FAST_MLA: /* kv_c, k_pe, kv_cache, sm, kv_cache_dtype, scale */
    if (n != 6)
      return -1;
    for (int i = 0; i < 4; ++i)
      objs[i] = PyTuple_GetItem(args, i);
    *text = PyTuple_GetItem(args, 4);
    objs[4] = PyTuple_GetItem(args, 5);
    return 0;
  }
  return -1;
}

/* Copies tensor `from` of `t` into tensor `to` of `a` (kvrt's order). */
static void move(tensors *a, int to, const tensors *t, int from) {
  if (!t->ptr[from])
    return;
  a->dl[to] = t->dl[from];
  memcpy(a->shape[to], t->shape[from], sizeof(a->shape[to]));
  memcpy(a->strides[to], t->strides[from], sizeof(a->strides[to]));
  a->dl[to].shape = a->shape[to];
  a->dl[to].strides = a->strides[to];
  a->ptr[to] = &a->dl[to];
}

/* The launch of a hit: the row checks Python makes per call, the views, the
 * stream. -1: not handled (Python's path refuses or handles it). */
static long fast_launch(int fast, const entry *x, tensors *t) {
  int op;
  tensors a; /* in kvrt's order */
  memset(a.ptr, 0, sizeof(a.ptr));
  const DLTensor *first;
  switch (fast) {
  case FAST_FLASH: {
    int64_t n = t->shape[4][0];
    if (t->shape[0][0] < n || t->shape[1][0] < n)
      return -1;
    op = OP_APPEND;
    move(&a, 0, t, 0);
    move(&a, 1, t, 1);
    move(&a, 2, t, 4);
    move(&a, 3, t, 2);
    move(&a, 4, t, 3);
    set_rows(&a, 0, n);
    set_rows(&a, 1, n);
    if (x->flags & F_HND) {
      hnd_view(&a, 3);
      hnd_view(&a, 4);
    }
    if (x->flags & F_SCALES) {
      move(&a, 5, t, 5);
      move(&a, 6, t, 6);
      /* One element: per tensor, passed as [1] (a [H] scale is per head). */
      squeeze(&a, 5);
      squeeze(&a, 6);
    }
    break;
  }
  case FAST_PAGED: {
    int64_t nnz = t->dl[0].ndim ? t->shape[0][0] : 0;
    if (t->shape[2][0] != nnz || t->shape[3][0] != nnz)
      return -1;
    if (x->flags & F_STACKED)
      split_stacked(t, 4);
    op = OP_PAGED_KV_APPEND;
    move(&a, 0, t, 0);
    move(&a, 1, t, 1);
    move(&a, 2, t, 2);
    move(&a, 3, t, 3);
    move(&a, 4, t, 6);
    move(&a, 5, t, 7);
    move(&a, 6, t, 4);
    move(&a, 7, t, 5);
    break;
  }
  case FAST_MLA: {
    int64_t n = t->shape[3][0];
    if (t->shape[0][0] < n || t->shape[1][0] < n)
      return -1;
    op = OP_MLA_APPEND;
    move(&a, 0, t, 0);
    move(&a, 1, t, 1);
    move(&a, 2, t, 3);
    move(&a, 3, t, 2);
    set_rows(&a, 0, n);
    set_rows(&a, 1, n);
    if (x->flags & F_SCALES) {
      move(&a, 4, t, 4);
      squeeze(&a, 4);
    }
    break;
  }
  default:
    return -1;
  }
  if (!Entry[op])
    return -1;
  first = a.ptr[0];
  void *stream = NULL;
  if (first->device.device_type != kDLCPU) {
    /* The framework's current stream: under CUDA-graph capture, the
     * capture stream. */
    const kvext_exchange_api *api = api_of(x->sig[0].type);
    if (!api || api->current_work_stream(first->device.device_type,
                                         first->device.device_id, &stream)) {
      PyErr_Clear();
      return -1;
    }
  }
  /* The entry may be replaced while the GIL is released. */
  PyObject *bundle = x->bundle, *kernel = x->kernel;
  void *handle = x->handle;
  Py_INCREF(bundle);
  Py_INCREF(kernel);
  ++Hits[fast];
  kvrt_status status =
      call_kvrt(op, handle, PyBytes_AsString(kernel), 0, stream, &a);
  Py_DECREF(kernel);
  Py_DECREF(bundle);
  return (long)status;
}

static PyObject *fast_call(int fast, PyObject *args) {
  PyObject *objs[MAX_TENSORS], *text;
  int stacked;
  if (unpack(fast, args, objs, &text, &stacked))
    return PyLong_FromLong(-1);
  tensors t;
  signature sig[MAX_TENSORS];
  memset(t.ptr, 0, sizeof(t.ptr));
  if (read_all(fast, objs, &t, sig, 0))
    return PyLong_FromLong(-1);
  const entry *x = find(fast, text, sig, FastCount[fast]);
  if (!x || !!(x->flags & F_STACKED) != stacked)
    return PyLong_FromLong(-1);
  return PyLong_FromLong(fast_launch(fast, x, &t));
}

/* flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
 *       k_scale, v_scale) -> -1 (not handled) or kvrt_status. */
static PyObject *kvext_flash(PyObject *self, PyObject *args) {
  (void)self;
  return fast_call(FAST_FLASH, args);
}

/* paged(key, value, batch_indices, positions, paged_kv_cache, kv_indices,
 *       kv_indptr, kv_layout) -> -1 (not handled) or kvrt_status. */
static PyObject *kvext_paged(PyObject *self, PyObject *args) {
  (void)self;
  return fast_call(FAST_PAGED, args);
}

/* mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale) -> -1 (not
 * handled) or kvrt_status. */
static PyObject *kvext_mla(PyObject *self, PyObject *args) {
  (void)self;
  return fast_call(FAST_MLA, args);
}

static void clear_entry(entry *x) {
  PyObject *b = x->bundle, *k = x->kernel, *s = x->text;
  memset(x, 0, sizeof(*x));
  Py_XDECREF(b);
  Py_XDECREF(k);
  Py_XDECREF(s);
}

/* remember(fast, bundle, handle, kernel, flags, args) -> bool: the call
 * `args` (as flash/paged/mla take them), which Python has checked and
 * launched, is launched by kernel `kernel` of `bundle` from now on. False
 * where a tensor's type has no exchange API (the call stays in Python). */
static PyObject *kvext_remember(PyObject *self, PyObject *args) {
  (void)self;
  int fast, flags;
  PyObject *bundle, *handle, *kernel, *call;
  if (!PyArg_ParseTuple(args, "iOOSiO!", &fast, &bundle, &handle, &kernel,
                        &flags, &PyTuple_Type, &call))
    return NULL;
  if (fast < 0 || fast >= OPS_FAST) {
    PyErr_Format(PyExc_ValueError, "kvgen._kvext: no fast operation %d", fast);
    return NULL;
  }
  void *h;
  if (as_pointer(handle, &h))
    return NULL;
  PyObject *objs[MAX_TENSORS], *text;
  int stacked;
  if (unpack(fast, call, objs, &text, &stacked))
    Py_RETURN_FALSE;
  if (!!(flags & F_STACKED) != stacked || !PyUnicode_Check(text))
    Py_RETURN_FALSE;
  tensors t;
  signature sig[MAX_TENSORS];
  memset(t.ptr, 0, sizeof(t.ptr));
  if (read_all(fast, objs, &t, sig, 1))
    Py_RETURN_FALSE;
  entry *x = find(fast, text, sig, FastCount[fast]);
  if (!x) {
    x = &Table[fast][TableNext[fast]];
    TableNext[fast] = (TableNext[fast] + 1) % TABLE_ENTRIES;
  }
  clear_entry(x);
  Py_INCREF(bundle);
  Py_INCREF(kernel);
  Py_INCREF(text);
  x->bundle = bundle;
  x->handle = h;
  x->kernel = kernel;
  x->text = text;
  x->flags = flags;
  memcpy(x->sig, sig, sizeof(x->sig));
  x->used = 1;
  Py_RETURN_TRUE;
}

/* forget(): empties the tables (a bundle registered or closed). */
static PyObject *kvext_forget(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  for (int f = 0; f < OPS_FAST; ++f)
    for (int e = 0; e < TABLE_ENTRIES; ++e)
      clear_entry(&Table[f][e]);
  Py_RETURN_NONE;
}

/* stats() -> (flash hits, paged hits, mla hits, table entries in use). */
static PyObject *kvext_stats(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  int used = 0;
  for (int f = 0; f < OPS_FAST; ++f)
    for (int e = 0; e < TABLE_ENTRIES; ++e)
      used += Table[f][e].used;
  return Py_BuildValue("KKKi", Hits[FAST_FLASH], Hits[FAST_PAGED],
                       Hits[FAST_MLA], used);
}

/* work_stream(obj, device_type, device_id) -> int or None: the current
 * stream of obj's framework (its exchange API), None without one. */
static PyObject *kvext_work_stream(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *obj;
  int device_type, device_id;
  if (!PyArg_ParseTuple(args, "Oii", &obj, &device_type, &device_id))
    return NULL;
  const kvext_exchange_api *api = learn_api(Py_TYPE(obj));
  if (!api)
    Py_RETURN_NONE;
  void *stream = NULL;
  if (api->current_work_stream(device_type, device_id, &stream))
    return NULL;
  return PyLong_FromVoidPtr(stream);
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
  if (as_pointer(kernel, &name))
    return NULL;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (as_pointer(PyTuple_GetItem(ptrs, i), &x))
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
