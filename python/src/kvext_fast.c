/*===- kvext_fast.c - kvgen._kvext's fast path for the ops' repeated calls ===*\
|*                                                                            *|
|* flash(), paged(), mla(): each tensor is read through its type's DLPack C   *|
|* exchange API, and the call's signature is looked up in a table that       *|
|* Python fills (remember()) after its checks passed. A hit launches; a miss  *|
|* returns -1 and Python runs its checks (kvext.c has the module).            *|
\*===----------------------------------------------------------------------===*/

#include "kvext.h"

/* A tensor's signature: what Python's checks and its choice of kernel read
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
  int kind;
  tensors a; /* in kvrt's order */
  memset(a.ptr, 0, sizeof(a.ptr));
  const DLTensor *first;
  switch (fast) {
  case FAST_FLASH: {
    int64_t n = t->shape[4][0];
    if (t->shape[0][0] < n || t->shape[1][0] < n)
      return -1;
    kind = KIND_Append;
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
    kind = KIND_PagedKvAppend;
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
    kind = KIND_MlaAppend;
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
  if (!kvext_entry[kind])
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
      kvext_call_kvrt(kind, handle, PyBytes_AsString(kernel), 0, stream, &a);
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
PyObject *kvext_flash(PyObject *self, PyObject *args) {
  (void)self;
  return fast_call(FAST_FLASH, args);
}

/* paged(key, value, batch_indices, positions, paged_kv_cache, kv_indices,
 *       kv_indptr, kv_layout) -> -1 (not handled) or kvrt_status. */
PyObject *kvext_paged(PyObject *self, PyObject *args) {
  (void)self;
  return fast_call(FAST_PAGED, args);
}

/* mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale) -> -1 (not
 * handled) or kvrt_status. */
PyObject *kvext_mla(PyObject *self, PyObject *args) {
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
PyObject *kvext_remember(PyObject *self, PyObject *args) {
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
  if (kvext_as_pointer(handle, &h))
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
PyObject *kvext_forget(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  for (int f = 0; f < OPS_FAST; ++f)
    for (int e = 0; e < TABLE_ENTRIES; ++e)
      clear_entry(&Table[f][e]);
  Py_RETURN_NONE;
}

/* stats() -> (flash hits, paged hits, mla hits, table entries in use). */
PyObject *kvext_stats(PyObject *self, PyObject *unused) {
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
PyObject *kvext_work_stream(PyObject *self, PyObject *args) {
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
