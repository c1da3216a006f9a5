/* resource.c: gpumem._lib.Resource, the Python object over a gpumem_resource, and the
 * functions that build each kind of resource into such an object.
 *
 * The Python classes of gpumem.mr subclass Resource; their __init__ calls one init_*
 * function here, which creates the C resource and stores it in the object. An adaptor's
 * Python object also keeps its upstream's Python object (in its __dict__), so that Python
 * never collects an upstream a living resource uses; the C resource retains it too. */
#include "lib.h"

#include <stddef.h>

PyObject *gpumem_py_wrap_resource(gpumem_resource *mr) {
  PyTypeObject *type = &gpumem_py_resource_type;
  gpumem_py_resource *object = (gpumem_py_resource *)type->tp_alloc(type, 0);
  if (object)
    object->mr = gpumem_resource_retain(mr);
  return (PyObject *)object;
}

gpumem_resource *gpumem_py_resource_handle(PyObject *object) {
  if (!PyObject_TypeCheck(object, &gpumem_py_resource_type)) {
    PyErr_Format(PyExc_TypeError, "expected a gpumem memory resource, got %R", object);
    return NULL;
  }
  gpumem_resource *mr = ((gpumem_py_resource *)object)->mr;
  if (!mr)
    PyErr_SetString(gpumem_py_invalid_error, "this memory resource was never initialized");
  return mr;
}

/* ---------------------------------------------------------------------------------------
 * The type
 * ------------------------------------------------------------------------------------- */

static int resource_traverse(gpumem_py_resource *self, visitproc visit, void *arg) {
  Py_VISIT(self->dict);
  return 0;
}

static int resource_clear(gpumem_py_resource *self) {
  Py_CLEAR(self->dict);
  return 0;
}

static void resource_dealloc(gpumem_py_resource *self) {
  PyObject_GC_UnTrack(self);
  /* A resource that still has live allocations refuses its last release and stays alive,
   * so the memory stays valid: the right outcome for a collected Python object too. */
  gpumem_resource_release(self->mr);
  resource_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *resource_allocate(gpumem_py_resource *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"nbytes", "stream", NULL};
  Py_ssize_t nbytes;
  PyObject *stream_object = Py_None;
  gpumem_stream stream;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|O", keywords, &nbytes, &stream_object) ||
      !gpumem_py_stream(stream_object, &stream) || !gpumem_py_resource_handle((PyObject *)self))
    return NULL;
  if (nbytes < 0)
    return PyErr_Format(gpumem_py_invalid_error, "nbytes must not be negative (%zd)", nbytes);
  void *ptr;
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_allocate(self->mr, (size_t)nbytes, stream, &ptr));
  return status == GPUMEM_OK ? PyLong_FromVoidPtr(ptr) : gpumem_py_raise_allocation(status);
}

static PyObject *resource_deallocate(gpumem_py_resource *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"ptr", "nbytes", "stream", NULL};
  PyObject *ptr_object, *stream_object = Py_None;
  Py_ssize_t nbytes;
  gpumem_stream stream;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On|O", keywords, &ptr_object, &nbytes,
                                   &stream_object) ||
      !gpumem_py_stream(stream_object, &stream) || !gpumem_py_resource_handle((PyObject *)self))
    return NULL;
  void *ptr = PyLong_AsVoidPtr(ptr_object);
  if (PyErr_Occurred())
    return NULL;
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_deallocate(self->mr, ptr, (size_t)nbytes, stream));
  return gpumem_py_none_or_raise(status);
}

static PyObject *resource_name(gpumem_py_resource *self, void *closure) {
  return gpumem_py_resource_handle((PyObject *)self)
             ? PyUnicode_FromString(gpumem_resource_name(self->mr))
             : NULL;
}

static PyObject *resource_spec(gpumem_py_resource *self, void *closure) {
  if (!gpumem_py_resource_handle((PyObject *)self))
    return NULL;
  /* 2 KiB holds the specs of all but chains near the grammar's deepest; those take a
   * buffer as large as the library says they need. */
  char spec[2048];
  gpumem_status status = gpumem_resource_describe(self->mr, spec, sizeof spec);
  if (status == GPUMEM_OK)
    return PyUnicode_FromString(spec);
  if (status != GPUMEM_ERR_INVALID_ARGUMENT)
    return gpumem_py_raise(status);
  size_t size = (size_t)1 << 20;
  char *whole = PyMem_Malloc(size);
  if (!whole)
    return PyErr_NoMemory();
  status = gpumem_resource_describe(self->mr, whole, size);
  PyObject *result = status == GPUMEM_OK ? PyUnicode_FromString(whole) : gpumem_py_raise(status);
  PyMem_Free(whole);
  return result;
}

static PyObject *resource_device(gpumem_py_resource *self, void *closure) {
  return gpumem_py_resource_handle((PyObject *)self)
             ? PyLong_FromLong(gpumem_resource_device(self->mr))
             : NULL;
}

static PyObject *resource_handle(gpumem_py_resource *self, void *closure) {
  return PyLong_FromVoidPtr(self->mr);
}

static PyObject *resource_upstream(gpumem_py_resource *self, void *closure) {
  if (!gpumem_py_resource_handle((PyObject *)self))
    return NULL;
  gpumem_resource *upstream;
  if (gpumem_resource_upstream(self->mr, &upstream) != GPUMEM_OK)
    Py_RETURN_NONE;
  return gpumem_py_wrap_resource(upstream);
}

/* A fact of the resource, or None when it does not know it. */
static PyObject *resource_fact(gpumem_py_resource *self, void *closure) {
  if (!gpumem_py_resource_handle((PyObject *)self))
    return NULL;
  uint64_t value;
  if (gpumem_resource_query(self->mr, (gpumem_query)(intptr_t)closure, &value) != GPUMEM_OK)
    Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(value);
}

/* A report or JSON document of the library, in a buffer of the size it says it needs (with
 * room to spare: figures move while other threads allocate). `which`: 0 the report of a
 * request of `bytes` at `alignment`, 1 the JSON dump. */
static PyObject *read_text(gpumem_py_resource *self, int which, size_t bytes, size_t alignment) {
  size_t needed = 0;
  for (int tries = 0; tries < 8; tries++) {
    size_t size = needed ? needed + 1024 : 0;
    char *buf = size ? PyMem_Malloc(size) : NULL;
    if (size && !buf)
      return PyErr_NoMemory();
    gpumem_status status;
    GPUMEM_PY_CALL(status,
                   which ? gpumem_resource_stats_json(self->mr, buf, size, &needed)
                         : gpumem_resource_report(self->mr, bytes, alignment, buf, size, &needed));
    PyObject *result = NULL;
    if (status == GPUMEM_OK)
      result = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
    else if (status != GPUMEM_ERR_INVALID_ARGUMENT || needed <= size)
      gpumem_py_raise(status); /* not a buffer too small */
    PyMem_Free(buf);
    if (result || PyErr_Occurred())
      return result;
  }
  return PyErr_Format(gpumem_py_error, "the report kept growing faster than its buffer");
}

static PyObject *resource_report(gpumem_py_resource *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"nbytes", "alignment", NULL};
  Py_ssize_t nbytes = 0, alignment = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|nn", keywords, &nbytes, &alignment) ||
      !gpumem_py_resource_handle((PyObject *)self))
    return NULL;
  if (nbytes < 0 || alignment < 0)
    return PyErr_Format(gpumem_py_invalid_error, "nbytes and alignment must not be negative");
  return read_text(self, 0, (size_t)nbytes, (size_t)alignment);
}

static PyObject *resource_stats_json(gpumem_py_resource *self, PyObject *unused) {
  return gpumem_py_resource_handle((PyObject *)self) ? read_text(self, 1, 0, 0) : NULL;
}

static PyObject *resource_stats(gpumem_py_resource *self, PyObject *unused) {
  PyObject *text = resource_stats_json(self, NULL);
  PyObject *json = text ? PyImport_ImportModule("json") : NULL;
  PyObject *result = json ? PyObject_CallMethod(json, "loads", "O", text) : NULL;
  Py_XDECREF(json);
  Py_XDECREF(text);
  return result;
}

static PyObject *resource_repr(gpumem_py_resource *self) {
  if (!self->mr)
    return PyUnicode_FromFormat("<%s (not initialized)>", Py_TYPE(self)->tp_name);
  PyObject *spec = resource_spec(self, NULL);
  PyObject *repr = spec ? PyUnicode_FromFormat("<%s %U>", Py_TYPE(self)->tp_name, spec) : NULL;
  Py_XDECREF(spec);
  return repr;
}

static PyMethodDef resource_methods[] = {
    {"allocate", (PyCFunction)(void (*)(void))resource_allocate, METH_VARARGS | METH_KEYWORDS,
     "allocate(nbytes, stream=None) -> int: device pointer, usable at once on stream"},
    {"deallocate", (PyCFunction)(void (*)(void))resource_deallocate, METH_VARARGS | METH_KEYWORDS,
     "deallocate(ptr, nbytes, stream=None): free once the stream's work is done"},
    {"report", (PyCFunction)(void (*)(void))resource_report, METH_VARARGS | METH_KEYWORDS,
     "report(nbytes=0, alignment=0) -> str: each resource's figures, the device's, and the "
     "verdict on a request of nbytes (what would stop it; 'none' when nothing would), as an "
     "OutOfMemoryError's .report"},
    {"stats", (PyCFunction)resource_stats, METH_NOARGS,
     "stats() -> dict: the resource's tree with every node's figures (stats_json, parsed)"},
    {"stats_json", (PyCFunction)resource_stats_json, METH_NOARGS,
     "stats_json() -> str: the JSON document of gpumem_resource_stats_json"},
    {NULL, NULL, 0, NULL},
};

#define FACT(name, query, doc)                                                                     \
  { name, (getter)resource_fact, NULL, doc, (void *)(intptr_t)(query) }

static PyGetSetDef resource_getset[] = {
    {"name", (getter)resource_name, NULL, "the kind of resource ('pool', 'cuda', ...)", NULL},
    {"spec", (getter)resource_spec, NULL, "the spec that builds an equal resource", NULL},
    {"device", (getter)resource_device, NULL, "the device it allocates for", NULL},
    {"handle", (getter)resource_handle, NULL, "the C gpumem_resource pointer, as an int", NULL},
    {"upstream", (getter)resource_upstream, NULL, "the resource it draws from, or None", NULL},
    FACT("live_bytes", GPUMEM_QUERY_LIVE_BYTES, "bytes allocated and not yet freed"),
    FACT("live_count", GPUMEM_QUERY_LIVE_COUNT, "allocations not yet freed"),
    FACT("reserved_bytes", GPUMEM_QUERY_RESERVED_BYTES, "bytes held from the upstream"),
    FACT("peak_live_bytes", GPUMEM_QUERY_PEAK_LIVE_BYTES, "most live bytes so far"),
    FACT("peak_reserved_bytes", GPUMEM_QUERY_PEAK_RESERVED_BYTES, "most reserved bytes so far"),
    FACT("largest_free_block", GPUMEM_QUERY_LARGEST_FREE_BLOCK, "largest free block, or None"),
    FACT("free_blocks", GPUMEM_QUERY_FREE_BLOCKS, "number of free blocks, or None"),
    FACT("free_bytes", GPUMEM_QUERY_FREE_BYTES, "reserved bytes not live, or None"),
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject gpumem_py_resource_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpumem.mr.MemoryResource",
    .tp_doc = "A gpumem memory resource (see gpumem.mr for the kinds).",
    .tp_basicsize = sizeof(gpumem_py_resource),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)resource_dealloc,
    .tp_traverse = (traverseproc)resource_traverse,
    .tp_clear = (inquiry)resource_clear,
    .tp_dictoffset = offsetof(gpumem_py_resource, dict),
    .tp_repr = (reprfunc)resource_repr,
    .tp_methods = resource_methods,
    .tp_getset = resource_getset,
};

/* ---------------------------------------------------------------------------------------
 * Building resources into objects
 * ------------------------------------------------------------------------------------- */

/* The Resource object a builder fills; NULL with an exception when it is not an empty one. */
static gpumem_py_resource *empty_resource(PyObject *object) {
  if (!PyObject_TypeCheck(object, &gpumem_py_resource_type)) {
    PyErr_Format(PyExc_TypeError, "expected a gpumem memory resource, got %R", object);
    return NULL;
  }
  gpumem_py_resource *self = (gpumem_py_resource *)object;
  if (self->mr) {
    PyErr_SetString(gpumem_py_invalid_error, "this memory resource is already initialized");
    return NULL;
  }
  return self;
}

/* Stores what a creation function made, or raises its failure. */
static PyObject *store(gpumem_py_resource *self, gpumem_status status, gpumem_resource *mr) {
  if (status != GPUMEM_OK)
    return gpumem_py_raise(status);
  self->mr = mr;
  Py_RETURN_NONE;
}

PyObject *gpumem_py_store_resource(PyObject *object, gpumem_resource *mr) {
  gpumem_py_resource *self = empty_resource(object);
  if (!self) {
    gpumem_resource_release(mr);
    return NULL;
  }
  return store(self, GPUMEM_OK, mr);
}

/* init_spec(self, spec, device) */
static PyObject *py_init_spec(PyObject *module, PyObject *args) {
  PyObject *object, *device_object;
  const char *spec;
  int device;
  gpumem_py_resource *self;
  if (!PyArg_ParseTuple(args, "OsO", &object, &spec, &device_object) ||
      !gpumem_py_device(device_object, &device) || !(self = empty_resource(object)))
    return NULL;
  gpumem_resource *mr = NULL;
  gpumem_status status = gpumem_resource_from_spec_for_device(spec, device, &mr);
  return store(self, status, mr);
}

/* init_base(self, kind, device, a, b, c, d, e): the base resources, with up to five numeric
 * options whose meaning depends on the kind (see gpumem/mr.py). */
static PyObject *py_init_base(PyObject *module, PyObject *args) {
  PyObject *object, *device_object;
  const char *kind;
  unsigned long long a = 0, b = 0, c = 0, d = 0, e = 0;
  int device;
  gpumem_py_resource *self;
  if (!PyArg_ParseTuple(args, "OsO|KKKKK", &object, &kind, &device_object, &a, &b, &c, &d, &e) ||
      !gpumem_py_device(device_object, &device) || !(self = empty_resource(object)))
    return NULL;
  gpumem_resource *mr = NULL;
  gpumem_status status;
  if (!strcmp(kind, "cuda")) {
    status = gpumem_cuda_create(device, &mr);
  } else if (!strcmp(kind, "managed")) {
    gpumem_managed_options options = {.prefetch = (int)a, .advice = (unsigned)b};
    status = gpumem_managed_create(device, &options, &mr);
  } else if (!strcmp(kind, "async")) {
    gpumem_async_options options = {.release_threshold = a,
                                    .initial_size = (size_t)b,
                                    .ipc_handle = (gpumem_ipc_handle)c,
                                    .pool = (void *)(uintptr_t)d,
                                    .managed = e != 0};
    status = gpumem_async_create(device, &options, &mr);
  } else if (!strcmp(kind, "pinned_host")) {
    gpumem_pinned_host_options options = {.flags = (unsigned)a};
    status = gpumem_pinned_host_create(device, &options, &mr);
  } else if (!strcmp(kind, "system")) {
    status = gpumem_system_create(device, &mr);
  } else if (!strcmp(kind, "vmm")) {
    gpumem_vmm_options options = {.reserve_size = (size_t)a, .piece_size = (size_t)b};
    status = gpumem_vmm_create(device, &options, &mr);
  } else {
    return PyErr_Format(gpumem_py_invalid_error, "unknown base resource %s", kind);
  }
  return store(self, status, mr);
}

/* Creates a resource of `kind` over `up`; GPUMEM_ERR_UNSUPPORTED with *known 0 for a kind
 * it does not know. */
static gpumem_status create_adaptor(const char *kind, gpumem_resource *up, unsigned long long a,
                                    unsigned long long b, unsigned long long c,
                                    unsigned long long d, int *known, gpumem_resource **mr) {
  *known = 1;
  if (!strcmp(kind, "pool")) {
    gpumem_pool_options options = {.initial_size = (size_t)a,
                                   .maximum_size = (size_t)b,
                                   .release_holes_over = c > UINT_MAX ? UINT_MAX : (unsigned)c,
                                   .release_holes_time = d > UINT_MAX ? UINT_MAX : (unsigned)d};
    return gpumem_pool_create(up, &options, mr);
  }
  if (!strcmp(kind, "arena")) {
    gpumem_arena_options options = {
        .size = (size_t)a, .maximum_size = (size_t)b, .superblock_size = (size_t)c};
    return gpumem_arena_create(up, &options, mr);
  }
  if (!strcmp(kind, "binning")) {
    /* Python's BinningMemoryResource passes 0, 0 for "no bins", as RMM's does. */
    gpumem_binning_options options = {
        .min_exponent = (int)a, .max_exponent = (int)b, .no_exponent_bins = !a && !b};
    return gpumem_binning_create(up, &options, mr);
  }
  if (!strcmp(kind, "fixed_size")) {
    gpumem_fixed_size_options options = {.block_size = (size_t)a,
                                         .blocks_to_preallocate = (size_t)b};
    return gpumem_fixed_size_create(up, &options, mr);
  }
  if (!strcmp(kind, "faulty")) {
    gpumem_faulty_options options = {.fail_at = a, .fail_every = b, .status = (gpumem_status)c};
    return gpumem_faulty_create(up, &options, mr);
  }
  if (!strcmp(kind, "limit")) {
    gpumem_limit_options options = {.maximum_size = (size_t)a};
    return gpumem_limit_create(up, &options, mr);
  }
  if (!strcmp(kind, "aligned")) {
    gpumem_aligned_options options = {.alignment = (size_t)a, .threshold = (size_t)b};
    return gpumem_aligned_create(up, &options, mr);
  }
  if (!strcmp(kind, "prefetch"))
    return gpumem_prefetch_create(up, mr);
  if (!strcmp(kind, "tracking")) {
    gpumem_tracking_options options = {.capture_stacks = a != 0};
    return gpumem_tracking_create(up, &options, mr);
  }
  if (!strcmp(kind, "stats")) {
    gpumem_statistics_options options = {.flush_bytes = (size_t)a, .flush_count = b};
    return gpumem_statistics_create(up, &options, mr);
  }
  *known = 0;
  return GPUMEM_ERR_UNSUPPORTED;
}

/* init_adaptor(self, kind, upstream, a, b, c, d): the resources over an upstream. Creating one
 * may allocate from the upstream (a pool's initial size), which may run Python callbacks. */
static PyObject *py_init_adaptor(PyObject *module, PyObject *args) {
  PyObject *object, *upstream_object;
  const char *kind;
  unsigned long long a = 0, b = 0, c = 0, d = 0;
  gpumem_py_resource *self;
  gpumem_resource *up;
  if (!PyArg_ParseTuple(args, "OsO|KKKK", &object, &kind, &upstream_object, &a, &b, &c, &d) ||
      !(self = empty_resource(object)) || !(up = gpumem_py_resource_handle(upstream_object)))
    return NULL;
  gpumem_resource *mr = NULL;
  gpumem_status status;
  int known;
  GPUMEM_PY_CALL(status, create_adaptor(kind, up, a, b, c, d, &known, &mr));
  if (!known)
    return PyErr_Format(gpumem_py_invalid_error, "unknown resource %s", kind);
  return store(self, status, mr);
}

/* binning_add_bin(self, size, bin or None) */
static PyObject *py_binning_add_bin(PyObject *module, PyObject *args) {
  PyObject *object, *bin_object;
  Py_ssize_t size;
  gpumem_resource *mr, *bin = NULL;
  if (!PyArg_ParseTuple(args, "OnO", &object, &size, &bin_object) ||
      !(mr = gpumem_py_resource_handle(object)))
    return NULL;
  if (bin_object != Py_None && !(bin = gpumem_py_resource_handle(bin_object)))
    return NULL;
  gpumem_status status = gpumem_binning_add_bin(mr, (size_t)size, bin);
  return gpumem_py_none_or_raise(status);
}

/* spec_define(name, mr or None) */
static PyObject *py_spec_define(PyObject *module, PyObject *args) {
  const char *name;
  PyObject *object;
  if (!PyArg_ParseTuple(args, "sO", &name, &object))
    return NULL;
  gpumem_resource *mr = NULL;
  if (object != Py_None && !(mr = gpumem_py_resource_handle(object)))
    return NULL;
  return gpumem_py_none_or_raise(gpumem_spec_define(name, mr));
}

/* limit_bytes(limit, which): which 0: get_allocated_bytes, 1: get_allocation_limit */
static PyObject *py_limit_bytes(PyObject *module, PyObject *args) {
  PyObject *object;
  int which;
  gpumem_resource *mr;
  if (!PyArg_ParseTuple(args, "Oi", &object, &which) || !(mr = gpumem_py_resource_handle(object)))
    return NULL;
  size_t bytes = 0;
  gpumem_status status = which ? gpumem_limit_get_allocation_limit(mr, &bytes)
                               : gpumem_limit_get_allocated_bytes(mr, &bytes);
  return status == GPUMEM_OK ? PyLong_FromSize_t(bytes) : gpumem_py_raise(status);
}

/* tracking_bytes(tracking) -> get_allocated_bytes() */
static PyObject *py_tracking_bytes(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  size_t bytes = 0;
  gpumem_status status = gpumem_tracking_get_allocated_bytes(mr, &bytes);
  return status == GPUMEM_OK ? PyLong_FromSize_t(bytes) : gpumem_py_raise(status);
}

/* tracking_str(tracking) -> get_outstanding_allocations_str(). Other threads may allocate
 * between asking the size and writing: then again, with more room. */
static PyObject *py_tracking_str(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  size_t needed = 0;
  gpumem_status status = gpumem_tracking_get_outstanding_allocations_str(mr, NULL, 0, &needed);
  while (status == GPUMEM_ERR_INVALID_ARGUMENT && needed > 0) {
    size_t room = needed + needed / 4 + 256;
    char *text = PyMem_Malloc(room);
    if (!text)
      return PyErr_NoMemory();
    status = gpumem_tracking_get_outstanding_allocations_str(mr, text, room, &needed);
    if (status == GPUMEM_OK) {
      PyObject *result = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
      PyMem_Free(text);
      return result;
    }
    PyMem_Free(text);
  }
  return gpumem_py_raise(status);
}

/* tracking_log(tracking): log_outstanding_allocations(), to stderr */
static PyObject *py_tracking_log(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  return gpumem_py_none_or_raise(gpumem_tracking_log_outstanding_allocations(mr));
}

/* statistics(mr, op): op 0 reads a statistics adaptor's top counters, 1 pushes fresh ones,
 * 2 pops them: the counters (read, before the push, popped) as (current_bytes,
 * current_count, peak_bytes, peak_count, total_bytes, total_count). A pop with nothing
 * pushed raises IndexError, as RMM's. */
static PyObject *py_statistics(PyObject *module, PyObject *args) {
  PyObject *object;
  int op;
  gpumem_resource *mr;
  if (!PyArg_ParseTuple(args, "Oi", &object, &op) || !(mr = gpumem_py_resource_handle(object)))
    return NULL;
  gpumem_statistics s = {.size = sizeof s};
  gpumem_status status = op == 0   ? gpumem_statistics_get(mr, &s)
                         : op == 1 ? gpumem_statistics_push(mr, &s)
                                   : gpumem_statistics_pop(mr, &s);
  if (status == GPUMEM_ERR_MISUSE && op == 2)
    return PyErr_Format(PyExc_IndexError, "%s: %s", gpumem_status_name(status),
                        gpumem_last_error_message());
  if (status != GPUMEM_OK)
    return gpumem_py_raise(status);
  return Py_BuildValue("(LLLLLL)", (long long)s.bytes.current, (long long)s.count.current,
                       (long long)s.bytes.peak, (long long)s.count.peak, (long long)s.bytes.total,
                       (long long)s.count.total);
}

/* resource_trim(self) -> bytes given back (pool, arena, binning, fixed_size) */
static PyObject *py_resource_trim(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  size_t released = 0;
  gpumem_status status;
  GPUMEM_PY_CALL_WITHOUT_GIL(status, gpumem_resource_trim(mr, &released)); /* it waits */
  return status == GPUMEM_OK ? PyLong_FromSize_t(released) : gpumem_py_raise(status);
}

/* async_pool_handle(mr) -> the driver pool (CUmemoryPool) of an async resource, as an int */
static PyObject *py_async_pool_handle(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  void *pool = NULL;
  gpumem_status status = gpumem_async_pool_handle(mr, &pool);
  return status == GPUMEM_OK ? PyLong_FromVoidPtr(pool) : gpumem_py_raise(status);
}

PyMethodDef gpumem_py_resource_functions[] = {
    {"async_pool_handle", py_async_pool_handle, METH_O, "async_pool_handle(mr) -> pool handle"},
    {"spec_define", py_spec_define, METH_VARARGS, "spec_define(name, mr or None)"},
    {"init_spec", py_init_spec, METH_VARARGS, "init_spec(mr, spec, device)"},
    {"init_base", py_init_base, METH_VARARGS, "init_base(mr, kind, device, a, b, c)"},
    {"init_adaptor", py_init_adaptor, METH_VARARGS, "init_adaptor(mr, kind, upstream, a, b, c, d)"},
    {"binning_add_bin", py_binning_add_bin, METH_VARARGS, "binning_add_bin(mr, size, bin)"},
    {"limit_bytes", py_limit_bytes, METH_VARARGS,
     "limit_bytes(limit, which) -> allocated bytes (0) or the limit (1)"},
    {"resource_trim", py_resource_trim, METH_O, "resource_trim(mr) -> bytes given back"},
    {"tracking_bytes", py_tracking_bytes, METH_O, "tracking_bytes(tracking) -> bytes outstanding"},
    {"tracking_str", py_tracking_str, METH_O, "tracking_str(tracking) -> the outstanding list"},
    {"tracking_log", py_tracking_log, METH_O, "tracking_log(tracking): the list to stderr"},
    {"statistics", py_statistics, METH_VARARGS,
     "statistics(mr, op) -> counters read (0), before a push (1) or popped (2)"},
    {NULL, NULL, 0, NULL},
};
