/* buffer.c: gpumem._lib.DeviceBuffer, RMM's DeviceBuffer over gpumem_buffer: an untyped,
 * resizable block of device memory with a stream (a gpumem.Stream as .stream) and the
 * resource it came from (.mr), that exposes __cuda_array_interface__, copies to and from
 * host memory (1-D arrays of bytes, as RMM takes) and other device arrays, and pickles
 * through host bytes (out of band with protocol 5). Copies from host memory wait for their
 * stream before returning, because the Python object lending the bytes may go away right
 * after. Also RMM's copy_ptr_to_host, copy_host_to_ptr and copy_device_to_ptr. */
#include "lib.h"

typedef struct py_buffer {
  PyObject_HEAD gpumem_buffer *buf;
  PyObject *mr; /* the resource object given, kept alive with the buffer (or NULL) */
  /* What the buffer's stream was given as (a Stream, a CuPy stream, ...; NULL for None),
   * kept alive with the buffer, and the gpumem.Stream .stream returns (made when asked). */
  PyObject *stream_object, *stream_cache;
} py_buffer;

/* Records what the buffer's stream is now given as: `object`, None for the default. */
static void set_stream_object(py_buffer *self, PyObject *object) {
  Py_XSETREF(self->stream_object, object && object != Py_None ? Py_NewRef(object) : NULL);
  Py_CLEAR(self->stream_cache);
}

/* Host memory for a copy: a 1-D array of 1-byte items, contiguous, as RMM takes (typed
 * data is viewed as bytes first: array.view("u1"), memoryview(x).cast("B")). TypeError for
 * what has no buffer, ValueError (InvalidArgumentError) for any other shape, or for
 * read-only memory where `writable`. */
static int host_bytes(PyObject *object, Py_buffer *view, int writable) {
  if (PyObject_GetBuffer(object, view, writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO) < 0) {
    if (writable && PyErr_ExceptionMatches(PyExc_BufferError)) { /* read-only memory */
      PyErr_Clear();
      PyErr_Format(gpumem_py_invalid_error, "host memory to copy into must be writable (%.100s)",
                   Py_TYPE(object)->tp_name);
    }
    return 0;
  }
  Py_ssize_t stride = view->strides && view->ndim == 1 ? view->strides[0] : 1;
  if (view->ndim == 1 && view->itemsize == 1 && (stride == 1 || view->shape[0] <= 1))
    return 1;
  PyErr_Format(gpumem_py_invalid_error,
               "host memory must be a contiguous 1-D array of bytes; got %d dimension(s) of "
               "%zd-byte items (view typed data as bytes: array.view(\"u1\"), "
               "memoryview(x).cast(\"B\"))",
               view->ndim, view->itemsize);
  PyBuffer_Release(view);
  return 0;
}

static int ok_or_raise(gpumem_status status) {
  if (status == GPUMEM_OK)
    return 1;
  gpumem_py_raise(status);
  return 0;
}

static int need_buffer(py_buffer *self) {
  if (self->buf)
    return 1;
  PyErr_SetString(gpumem_py_invalid_error, "this DeviceBuffer was never initialized");
  return 0;
}

/* The stream argument, or the buffer's own stream for None. */
static int stream_or_own(py_buffer *self, PyObject *object, gpumem_stream *stream) {
  if (object == NULL || object == Py_None) {
    *stream = gpumem_buffer_stream(self->buf);
    return 1;
  }
  return gpumem_py_stream(object, stream);
}

/* The arguments of a method whose only one is stream=None (the buffer's own). */
static int only_stream_argument(py_buffer *self, PyObject *args, PyObject *kwargs,
                                gpumem_stream *stream) {
  static char *keywords[] = {"stream", NULL};
  PyObject *stream_object = Py_None;
  return need_buffer(self) &&
         PyArg_ParseTupleAndKeywords(args, kwargs, "|O", keywords, &stream_object) &&
         stream_or_own(self, stream_object, stream);
}

/* A new, empty object of `type`, DeviceBuffer or a subclass (copies and to_device make
 * their caller's class). */
static py_buffer *new_object(PyTypeObject *type) {
  return (py_buffer *)type->tp_alloc(type, 0);
}

/* Fills `self` with a buffer of `size` bytes on `stream` from mr_object (None: current). */
static int make_buffer(py_buffer *self, Py_ssize_t size, gpumem_stream stream,
                       PyObject *stream_object, PyObject *mr_object) {
  if (size < 0) {
    PyErr_Format(gpumem_py_invalid_error, "size must not be negative (%zd)", size);
    return 0;
  }
  int given = mr_object != Py_None;
  gpumem_resource *mr = given ? gpumem_py_resource_handle(mr_object) : NULL;
  if (given && !mr)
    return 0;
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_buffer_create((size_t)size, stream, mr, &self->buf));
  if (status != GPUMEM_OK) {
    gpumem_py_raise_allocation(status);
    return 0;
  }
  if (given)
    self->mr = Py_NewRef(mr_object);
  set_stream_object(self, stream_object);
  return 1;
}

/* ---------------------------------------------------------------------------------------
 * Construction, destruction
 * ------------------------------------------------------------------------------------- */

static int buffer_init(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"size", "ptr", "stream", "mr", NULL};
  Py_ssize_t size = 0;
  PyObject *ptr_object = Py_None, *stream_object = Py_None, *mr_object = Py_None;
  gpumem_stream stream;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|nOOO", keywords, &size, &ptr_object,
                                   &stream_object, &mr_object) ||
      !gpumem_py_stream(stream_object, &stream))
    return -1;
  if (self->buf) {
    PyErr_SetString(gpumem_py_invalid_error, "DeviceBuffer is already initialized");
    return -1;
  }
  if (!make_buffer(self, size, stream, stream_object, mr_object))
    return -1;
  if (ptr_object != Py_None && size > 0) {
    /* Copies `size` bytes from the address given (device or host memory); 0 copies
     * nothing, as RMM's ptr=0 default. */
    void *src = PyLong_AsVoidPtr(ptr_object);
    if (PyErr_Occurred())
      return -1;
    gpumem_status status =
        src ? gpumem_memcpy_async(gpumem_buffer_data(self->buf), src, (size_t)size, stream)
            : GPUMEM_OK;
    if (!ok_or_raise(status) || (src && !gpumem_py_synchronize(stream)))
      return -1;
  }
  return 0;
}

static void buffer_dealloc(py_buffer *self) {
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_buffer_destroy(self->buf));
  if (status != GPUMEM_OK) /* the memory stays allocated: say so, as a destructor can */
    gpumem_py_report_unraisable(status, (PyObject *)self);
  Py_XDECREF(self->mr);
  Py_XDECREF(self->stream_object);
  Py_XDECREF(self->stream_cache);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A buffer holding a copy of a host object's bytes (buffer protocol). */
static PyObject *from_host(PyTypeObject *type, PyObject *data, PyObject *stream_object,
                           PyObject *mr_object) {
  Py_buffer view;
  gpumem_stream stream;
  if (!gpumem_py_stream(stream_object, &stream) || !host_bytes(data, &view, 0))
    return NULL;
  py_buffer *self = new_object(type);
  int ok = self && make_buffer(self, view.len, stream, stream_object, mr_object) &&
           ok_or_raise(gpumem_buffer_copy_from_host(self->buf, 0, view.buf, (size_t)view.len)) &&
           gpumem_py_synchronize(stream);
  PyBuffer_Release(&view);
  if (!ok) {
    Py_XDECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

/* to_device(data, stream=None, mr=None): a new DeviceBuffer with a copy of host bytes; as a
 * class method, of the class it is called on. */
static PyObject *buffer_to_device(PyObject *cls, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"b", "stream", "mr", NULL};
  PyObject *data, *stream_object = Py_None, *mr_object = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO", keywords, &data, &stream_object,
                                   &mr_object))
    return NULL;
  PyTypeObject *type = cls && PyType_Check(cls) ? (PyTypeObject *)cls : &gpumem_py_buffer_type;
  return from_host(type, data, stream_object, mr_object);
}

/* ---------------------------------------------------------------------------------------
 * Sizes
 * ------------------------------------------------------------------------------------- */

static PyObject *buffer_ptr(py_buffer *self, void *closure) {
  return need_buffer(self) ? PyLong_FromVoidPtr(gpumem_buffer_data(self->buf)) : NULL;
}

static PyObject *buffer_size(py_buffer *self, void *closure) {
  return need_buffer(self) ? PyLong_FromSize_t(gpumem_buffer_size(self->buf)) : NULL;
}

/* .stream: a gpumem.Stream (the one given, or one holding what was given: int(buf.stream)
 * is the handle). */
static PyObject *buffer_stream(py_buffer *self, void *closure) {
  if (!need_buffer(self))
    return NULL;
  if (!self->stream_cache) {
    PyObject *module = PyImport_ImportModule("gpumem.stream");
    self->stream_cache =
        module ? PyObject_CallMethod(module, "_wrap", "(NO)",
                                     PyLong_FromVoidPtr(gpumem_buffer_stream(self->buf)),
                                     self->stream_object ? self->stream_object : Py_None)
               : NULL;
    Py_XDECREF(module);
  }
  return Py_XNewRef(self->stream_cache);
}

/* .mr: the resource object given, or the Python object of the resource the buffer came
 * from (the one set as current where it still is, else a plain MemoryResource). */
static PyObject *buffer_mr(py_buffer *self, void *closure) {
  if (!need_buffer(self))
    return NULL;
  if (self->mr)
    return Py_NewRef(self->mr);
  gpumem_resource *resource = gpumem_buffer_resource(self->buf);
  PyObject *module = PyImport_ImportModule("gpumem.mr");
  PyObject *current = module ? PyObject_GetAttrString(module, "_current") : NULL;
  Py_XDECREF(module);
  if (current && PyDict_Check(current)) {
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (!self->mr && PyDict_Next(current, &position, &key, &value))
      if (PyObject_TypeCheck(value, &gpumem_py_resource_type) &&
          ((gpumem_py_resource *)value)->mr == resource)
        self->mr = Py_NewRef(value);
  }
  Py_XDECREF(current);
  PyErr_Clear(); /* without gpumem.mr's table: a plain resource object */
  if (!self->mr)
    self->mr = gpumem_py_wrap_resource(resource);
  return Py_XNewRef(self->mr);
}

static PyObject *buffer_sizeof(py_buffer *self, PyObject *unused) {
  return need_buffer(self) ? PyLong_FromSize_t(gpumem_buffer_size(self->buf)) : NULL;
}

static PyObject *buffer_capacity(py_buffer *self, PyObject *unused) {
  return need_buffer(self) ? PyLong_FromSize_t(gpumem_buffer_capacity(self->buf)) : NULL;
}

static Py_ssize_t buffer_length(py_buffer *self) {
  return need_buffer(self) ? (Py_ssize_t)gpumem_buffer_size(self->buf) : -1;
}

typedef gpumem_status (*sizing_fn)(gpumem_buffer *, size_t, gpumem_stream);

/* resize(new_size, stream=None) / reserve(new_capacity, stream=None): `keywords` holds the
 * size's name, RMM's for each. */
static PyObject *sizing(py_buffer *self, PyObject *args, PyObject *kwargs, char **keywords,
                        sizing_fn fn) {
  Py_ssize_t size;
  PyObject *stream_object = Py_None;
  gpumem_stream stream;
  if (!need_buffer(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "n|O", keywords, &size, &stream_object) ||
      !stream_or_own(self, stream_object, &stream))
    return NULL;
  if (size < 0)
    return PyErr_Format(gpumem_py_invalid_error, "size must not be negative (%zd)", size);
  gpumem_stream before = gpumem_buffer_stream(self->buf);
  gpumem_status status;
  GPUMEM_PY_CALL(status, fn(self->buf, (size_t)size, stream));
  if (gpumem_buffer_stream(self->buf) != before) /* a reallocation moved it to `stream` */
    set_stream_object(self, stream_object);
  return gpumem_py_none_or_raise(status);
}

static PyObject *buffer_resize(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"new_size", "stream", NULL};
  return sizing(self, args, kwargs, keywords, gpumem_buffer_resize);
}

static PyObject *buffer_reserve(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"new_capacity", "stream", NULL};
  return sizing(self, args, kwargs, keywords, gpumem_buffer_reserve);
}

/* ---------------------------------------------------------------------------------------
 * Copies
 * ------------------------------------------------------------------------------------- */

static PyObject *buffer_copy(py_buffer *self, PyObject *args, PyObject *kwargs) {
  gpumem_stream stream;
  if (!only_stream_argument(self, args, kwargs, &stream))
    return NULL;
  py_buffer *copy = new_object(Py_TYPE(self));
  gpumem_status status = GPUMEM_OK;
  if (copy)
    GPUMEM_PY_CALL(status, gpumem_buffer_copy(self->buf, stream, NULL, &copy->buf));
  if (!copy || !ok_or_raise(status)) {
    Py_XDECREF(copy);
    return NULL;
  }
  copy->mr = Py_XNewRef(self->mr);
  PyObject *stream_object = PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, 0)
                            : kwargs               ? PyDict_GetItemString(kwargs, "stream")
                                                   : NULL;
  set_stream_object(copy, stream_object && stream_object != Py_None ? stream_object
                                                                    : self->stream_object);
  return (PyObject *)copy;
}

static PyObject *buffer_deepcopy(py_buffer *self, PyObject *memo) {
  PyObject *args = PyTuple_New(0);
  PyObject *copy = args ? buffer_copy(self, args, NULL) : NULL;
  Py_XDECREF(args);
  return copy;
}

/* Copies the whole buffer into host memory `view` (at least size bytes) on `stream`. */
static int copy_out(py_buffer *self, void *dst, gpumem_stream stream) {
  gpumem_status status = gpumem_memcpy_async(dst, gpumem_buffer_data(self->buf),
                                             gpumem_buffer_size(self->buf), stream);
  return ok_or_raise(status) && gpumem_py_synchronize(stream);
}

/* copy_to_host(ary=None, stream=None): into `ary` (writable, large enough), or into a new
 * numpy uint8 array (a bytearray where numpy is missing). Returns what it filled. */
static PyObject *buffer_copy_to_host(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"ary", "stream", NULL};
  PyObject *ary = Py_None, *stream_object = Py_None;
  gpumem_stream stream;
  if (!need_buffer(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "|OO", keywords, &ary, &stream_object) ||
      !stream_or_own(self, stream_object, &stream))
    return NULL;
  size_t size = gpumem_buffer_size(self->buf);
  if (ary == Py_None) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy) {
      ary = PyObject_CallMethod(numpy, "empty", "(ns)", (Py_ssize_t)size, "u1");
      Py_DECREF(numpy);
    } else {
      PyErr_Clear();
      ary = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)size);
    }
    if (!ary)
      return NULL;
  } else {
    Py_INCREF(ary);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(ary, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
    Py_DECREF(ary);
    return NULL;
  }
  int ok = 1;
  if ((size_t)view.len < size) {
    PyErr_Format(gpumem_py_invalid_error, "the host array holds %zd bytes, the buffer %zu",
                 view.len, size);
    ok = 0;
  }
  ok = ok && copy_out(self, view.buf, stream);
  PyBuffer_Release(&view);
  if (!ok)
    Py_CLEAR(ary);
  return ary;
}

/* The buffer's contents as bytes, copied on `stream`. */
static PyObject *to_bytes(py_buffer *self, gpumem_stream stream) {
  PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)gpumem_buffer_size(self->buf));
  if (bytes && !copy_out(self, PyBytes_AS_STRING(bytes), stream))
    Py_CLEAR(bytes);
  return bytes;
}

static PyObject *buffer_tobytes(py_buffer *self, PyObject *args, PyObject *kwargs) {
  gpumem_stream stream;
  return only_stream_argument(self, args, kwargs, &stream) ? to_bytes(self, stream) : NULL;
}

static PyObject *buffer_bytes(py_buffer *self, PyObject *unused) {
  return need_buffer(self) ? to_bytes(self, gpumem_buffer_stream(self->buf)) : NULL;
}

/* Copies `size` bytes from `src` (host or device) into the buffer's start on `stream`. */
static PyObject *copy_in(py_buffer *self, const void *src, size_t size, gpumem_stream stream) {
  size_t capacity = gpumem_buffer_size(self->buf);
  if (size > capacity)
    return PyErr_Format(gpumem_py_invalid_error,
                        "the source holds %zu bytes, more than the buffer's %zu", size, capacity);
  gpumem_status status = gpumem_memcpy_async(gpumem_buffer_data(self->buf), src, size, stream);
  return ok_or_raise(status) && gpumem_py_synchronize(stream) ? Py_NewRef(Py_None) : NULL;
}

static PyObject *buffer_copy_from_host(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"ary", "stream", NULL};
  PyObject *ary, *stream_object = Py_None;
  gpumem_stream stream;
  Py_buffer view;
  if (!need_buffer(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", keywords, &ary, &stream_object) ||
      !stream_or_own(self, stream_object, &stream) || !host_bytes(ary, &view, 0))
    return NULL;
  PyObject *result = copy_in(self, view.buf, (size_t)view.len, stream);
  PyBuffer_Release(&view);
  return result;
}

/* The data pointer and byte count of a contiguous __cuda_array_interface__ object. */
static int device_array(PyObject *array, void **data, size_t *bytes) {
  PyObject *cai = PyObject_GetAttrString(array, "__cuda_array_interface__");
  if (!cai) {
    PyErr_Format(gpumem_py_invalid_error,
                 "expected an object with __cuda_array_interface__, "
                 "not %.100s",
                 Py_TYPE(array)->tp_name);
    return 0;
  }
  PyObject *module = PyImport_ImportModule("gpumem._interop");
  PyObject *extent = module ? PyObject_CallMethod(module, "contiguous_extent", "(O)", cai) : NULL;
  Py_XDECREF(module);
  Py_DECREF(cai);
  if (!extent)
    return 0;
  unsigned long long address = 0, size = 0;
  int ok = PyArg_ParseTuple(extent, "KK", &address, &size);
  Py_DECREF(extent);
  *data = (void *)(uintptr_t)address;
  *bytes = (size_t)size;
  return ok;
}

static PyObject *buffer_copy_from_device(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"cuda_ary", "stream", NULL};
  PyObject *array, *stream_object = Py_None;
  gpumem_stream stream;
  void *data;
  size_t bytes;
  if (!need_buffer(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", keywords, &array, &stream_object) ||
      !stream_or_own(self, stream_object, &stream) || !device_array(array, &data, &bytes))
    return NULL;
  return copy_in(self, data, bytes, stream);
}

static PyObject *buffer_prefetch(py_buffer *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"device", "stream", NULL};
  PyObject *device_object = Py_None, *stream_object = Py_None;
  gpumem_stream stream;
  int device;
  if (!need_buffer(self) ||
      !PyArg_ParseTupleAndKeywords(args, kwargs, "|OO", keywords, &device_object, &stream_object) ||
      !gpumem_py_device(device_object, &device) || !stream_or_own(self, stream_object, &stream))
    return NULL;
  gpumem_status status =
      gpumem_prefetch(gpumem_buffer_data(self->buf), gpumem_buffer_size(self->buf), device, stream);
  /* Memory that is not managed has nothing to move: as RMM's prefetch, a no-op. */
  if (status == GPUMEM_ERR_UNSUPPORTED)
    status = GPUMEM_OK;
  return gpumem_py_none_or_raise(status);
}

/* ---------------------------------------------------------------------------------------
 * Interfaces
 * ------------------------------------------------------------------------------------- */

static PyObject *buffer_cuda_array_interface(py_buffer *self, void *closure) {
  if (!need_buffer(self))
    return NULL;
  /* As RMM's: version 0, no "stream" (consumers do not wait for the buffer's stream). */
  return Py_BuildValue("{s:(NO),s:(n),s:O,s:s,s:i}", "data",
                       PyLong_FromVoidPtr(gpumem_buffer_data(self->buf)), Py_False, "shape",
                       (Py_ssize_t)gpumem_buffer_size(self->buf), "strides", Py_None, "typestr",
                       "|u1", "version", 0);
}

/* Pickles as host bytes, out of band (a PickleBuffer over a bytearray) from protocol 5;
 * unpickling copies them to a buffer of the current resource. */
static PyObject *buffer_reduce_ex(py_buffer *self, PyObject *protocol_object) {
  long protocol = protocol_object ? PyLong_AsLong(protocol_object) : 2;
  if (protocol == -1 && PyErr_Occurred())
    return NULL;
  PyObject *bytes = need_buffer(self) ? to_bytes(self, gpumem_buffer_stream(self->buf)) : NULL;
  if (bytes && protocol >= 5) {
    PyObject *host = PyByteArray_FromObject(bytes);
    Py_SETREF(bytes, host ? PyPickleBuffer_FromObject(host) : NULL);
    Py_XDECREF(host);
  }
  if (!bytes)
    return NULL;
  /* gpumem._lib.to_device, or a subclass's own to_device (a bound class method pickles) */
  int base = Py_TYPE(self) == &gpumem_py_buffer_type;
  PyObject *module = base ? PyImport_ImportModule("gpumem._lib") : NULL;
  PyObject *owner = base ? module : (PyObject *)Py_TYPE(self);
  PyObject *rebuild = owner ? PyObject_GetAttrString(owner, "to_device") : NULL;
  Py_XDECREF(module);
  if (!rebuild) {
    Py_DECREF(bytes);
    return NULL;
  }
  return Py_BuildValue("(N(N))", rebuild, bytes);
}

static PyMethodDef buffer_methods[] = {
    {"capacity", (PyCFunction)buffer_capacity, METH_NOARGS, "bytes allocated"},
    {"resize", (PyCFunction)(void (*)(void))buffer_resize, METH_VARARGS | METH_KEYWORDS,
     "resize(new_size, stream=None): contents kept; reallocates past the capacity"},
    {"reserve", (PyCFunction)(void (*)(void))buffer_reserve, METH_VARARGS | METH_KEYWORDS,
     "reserve(new_capacity, stream=None)"},
    {"copy", (PyCFunction)(void (*)(void))buffer_copy, METH_VARARGS | METH_KEYWORDS,
     "copy(stream=None) -> a new DeviceBuffer with the same contents"},
    {"copy_to_host", (PyCFunction)(void (*)(void))buffer_copy_to_host, METH_VARARGS | METH_KEYWORDS,
     "copy_to_host(ary=None, stream=None) -> host array"},
    {"copy_from_host", (PyCFunction)(void (*)(void))buffer_copy_from_host,
     METH_VARARGS | METH_KEYWORDS, "copy_from_host(ary, stream=None)"},
    {"copy_from_device", (PyCFunction)(void (*)(void))buffer_copy_from_device,
     METH_VARARGS | METH_KEYWORDS, "copy_from_device(cuda_ary, stream=None)"},
    {"tobytes", (PyCFunction)(void (*)(void))buffer_tobytes, METH_VARARGS | METH_KEYWORDS,
     "tobytes(stream=None) -> bytes"},
    {"prefetch", (PyCFunction)(void (*)(void))buffer_prefetch, METH_VARARGS | METH_KEYWORDS,
     "prefetch(device=None, stream=None): move managed memory to the device"},
    {"to_device", (PyCFunction)(void (*)(void))buffer_to_device,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, "to_device(b, stream=None, mr=None)"},
    {"__reduce_ex__", (PyCFunction)buffer_reduce_ex, METH_O,
     "pickles through host bytes (out of band from protocol 5)"},
    {"__reduce__", (PyCFunction)buffer_reduce_ex, METH_NOARGS, "pickles through host bytes"},
    {"__sizeof__", (PyCFunction)buffer_sizeof, METH_NOARGS, "the size in bytes, as RMM's"},
    {"__bytes__", (PyCFunction)buffer_bytes, METH_NOARGS, "the contents, as tobytes()"},
    {"__copy__", (PyCFunction)buffer_deepcopy, METH_NOARGS, "copy()"},
    {"__deepcopy__", (PyCFunction)buffer_deepcopy, METH_O, "copy()"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef buffer_getset[] = {
    {"ptr", (getter)buffer_ptr, NULL, "device address of the data", NULL},
    {"size", (getter)buffer_size, NULL, "size in bytes", NULL},
    {"nbytes", (getter)buffer_size, NULL, "size in bytes", NULL},
    {"stream", (getter)buffer_stream, NULL,
     "the gpumem.Stream the buffer is ordered on (int(buf.stream): its handle)", NULL},
    {"mr", (getter)buffer_mr, NULL, "the resource the buffer came from", NULL},
    {"__cuda_array_interface__", (getter)buffer_cuda_array_interface, NULL,
     "the CUDA array interface (version 0, as RMM's)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods buffer_sequence = {.sq_length = (lenfunc)buffer_length};

PyTypeObject gpumem_py_buffer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpumem.DeviceBuffer",
    .tp_doc = "DeviceBuffer(size=0, ptr=None, stream=None, mr=None): untyped device memory",
    .tp_basicsize = sizeof(py_buffer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)buffer_init,
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_methods = buffer_methods,
    .tp_getset = buffer_getset,
    .tp_as_sequence = &buffer_sequence,
};

/* ---------------------------------------------------------------------------------------
 * Copies between addresses (RMM's module functions); host copies wait for their stream.
 * ------------------------------------------------------------------------------------- */

/* An address given as an int. */
static int address(PyObject *object, void **ptr) {
  *ptr = PyLong_AsVoidPtr(object);
  return !PyErr_Occurred();
}

/* copy_ptr_to_host(db, hb, stream=None): hb's length in bytes from device address db. */
static PyObject *py_copy_ptr_to_host(PyObject *unused, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"db", "hb", "stream", NULL};
  PyObject *db, *hb, *stream_object = Py_None;
  gpumem_stream stream;
  void *src;
  Py_buffer view;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O", keywords, &db, &hb, &stream_object) ||
      !address(db, &src) || !gpumem_py_stream(stream_object, &stream) || !host_bytes(hb, &view, 1))
    return NULL;
  int ok = ok_or_raise(gpumem_memcpy_async(view.buf, src, (size_t)view.len, stream)) &&
           gpumem_py_synchronize(stream);
  PyBuffer_Release(&view);
  return ok ? Py_NewRef(Py_None) : NULL;
}

/* copy_host_to_ptr(hb, db, stream=None): hb's bytes to device address db. */
static PyObject *py_copy_host_to_ptr(PyObject *unused, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"hb", "db", "stream", NULL};
  PyObject *db, *hb, *stream_object = Py_None;
  gpumem_stream stream;
  void *dst;
  Py_buffer view;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O", keywords, &hb, &db, &stream_object) ||
      !address(db, &dst) || !gpumem_py_stream(stream_object, &stream) || !host_bytes(hb, &view, 0))
    return NULL;
  int ok = ok_or_raise(gpumem_memcpy_async(dst, view.buf, (size_t)view.len, stream)) &&
           gpumem_py_synchronize(stream);
  PyBuffer_Release(&view);
  return ok ? Py_NewRef(Py_None) : NULL;
}

/* copy_device_to_ptr(d_src, d_dst, count, stream=None): ordered on stream, not waited for. */
static PyObject *py_copy_device_to_ptr(PyObject *unused, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"d_src", "d_dst", "count", "stream", NULL};
  PyObject *src_object, *dst_object, *stream_object = Py_None;
  Py_ssize_t count;
  gpumem_stream stream;
  void *src, *dst;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOn|O", keywords, &src_object, &dst_object,
                                   &count, &stream_object) ||
      !address(src_object, &src) || !address(dst_object, &dst) ||
      !gpumem_py_stream(stream_object, &stream))
    return NULL;
  if (count < 0)
    return PyErr_Format(gpumem_py_invalid_error, "count must not be negative (%zd)", count);
  return gpumem_py_none_or_raise(gpumem_memcpy_async(dst, src, (size_t)count, stream));
}

PyMethodDef gpumem_py_buffer_functions[] = {
    {"to_device", (PyCFunction)(void (*)(void))buffer_to_device, METH_VARARGS | METH_KEYWORDS,
     "to_device(b, stream=None, mr=None) -> DeviceBuffer holding a copy of host bytes"},
    {"copy_ptr_to_host", (PyCFunction)(void (*)(void))py_copy_ptr_to_host,
     METH_VARARGS | METH_KEYWORDS, "copy_ptr_to_host(db, hb, stream=None)"},
    {"copy_host_to_ptr", (PyCFunction)(void (*)(void))py_copy_host_to_ptr,
     METH_VARARGS | METH_KEYWORDS, "copy_host_to_ptr(hb, db, stream=None)"},
    {"copy_device_to_ptr", (PyCFunction)(void (*)(void))py_copy_device_to_ptr,
     METH_VARARGS | METH_KEYWORDS, "copy_device_to_ptr(d_src, d_dst, count, stream=None)"},
    {NULL, NULL, 0, NULL},
};
