/* stream.c: streams from Python. gpumem_py_stream turns whatever a caller hands gpumem as a
 * stream into a gpumem_stream: None, a CUstream value as an int, an object with the CUDA
 * stream protocol (__cuda_stream__() -> (0, handle): gpumem.Stream, cuda.core, recent
 * Numba), the stream objects of CuPy, PyTorch and older Numba, and cuda.bindings' CUstream
 * and cudaStream_t. The module functions here create and destroy streams (for gpumem.Stream,
 * whose Python class in gpumem/stream.py owns them) and expose the conversion. */
#include "lib.h"

static int bad_handle(PyObject *value) {
  PyErr_Format(gpumem_py_invalid_error, "%R is not a stream handle (0 to 2**64 - 1)", value);
  return 0;
}

/* The value of a stream handle: an int, None (0), a ctypes value (.value: numba's c_void_p)
 * or a cuda.bindings CUstream/cudaStream_t (int() of an object with getPtr). */
static int handle_value(PyObject *value, gpumem_stream *stream) {
  PyObject *number;
  if (PyLong_Check(value) || value == Py_None)
    number = Py_NewRef(value);
  else if (PyObject_HasAttrString(value, "getPtr")) /* cuda.bindings: int() is the handle */
    number = PyNumber_Long(value);
  else if (PyObject_HasAttrString(value, "value"))
    number = PyObject_GetAttrString(value, "value");
  else
    return PyErr_Format(gpumem_py_invalid_error, "a stream handle must be an integer, not %.100s",
                        Py_TYPE(value)->tp_name) != NULL;
  if (!number)
    return 0;
  if (number != Py_None && !PyLong_Check(number)) {
    PyErr_Format(gpumem_py_invalid_error, "a stream handle must be an integer, not %.100s",
                 Py_TYPE(number)->tp_name);
    Py_DECREF(number);
    return 0;
  }
  uintptr_t handle = number == Py_None ? 0 : (uintptr_t)PyLong_AsUnsignedLongLong(number);
  Py_DECREF(number);
  if (PyErr_Occurred()) { /* negative or wider than a pointer */
    PyErr_Clear();
    return bad_handle(value);
  }
  *stream = (gpumem_stream)handle;
  return 1;
}

/* The CUDA stream protocol: __cuda_stream__() returns (version, handle); version 0 is the
 * only one defined. */
static int from_protocol(PyObject *object, PyObject *method, gpumem_stream *stream) {
  PyObject *pair = PyCallable_Check(method) ? PyObject_CallNoArgs(method) : Py_NewRef(method);
  if (!pair)
    return 0;
  int ok = 0;
  if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
    PyErr_Format(gpumem_py_invalid_error,
                 "%R.__cuda_stream__() must return (version, handle), not %R", object, pair);
  } else {
    long version = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
    if (version == -1 && PyErr_Occurred())
      PyErr_Clear();
    if (version != 0)
      PyErr_Format(gpumem_py_invalid_error,
                   "CUDA stream protocol version %R is not supported (gpumem reads version 0)",
                   PyTuple_GET_ITEM(pair, 0));
    else
      ok = handle_value(PyTuple_GET_ITEM(pair, 1), stream);
  }
  Py_DECREF(pair);
  return ok;
}

int gpumem_py_stream(PyObject *object, gpumem_stream *stream) {
  if (object == NULL || object == Py_None) {
    *stream = NULL;
    return 1;
  }
  if (PyLong_Check(object))
    return handle_value(object, stream);
  PyObject *method = PyObject_GetAttrString(object, "__cuda_stream__");
  if (method) {
    int ok = from_protocol(object, method, stream);
    Py_DECREF(method);
    return ok;
  }
  PyErr_Clear();
  if (PyObject_HasAttrString(object, "getPtr")) /* a cuda.bindings CUstream or cudaStream_t */
    return handle_value(object, stream);
  /* torch.cuda.Stream.cuda_stream, cupy.cuda.Stream.ptr, numba's Stream.handle */
  static const char *const attributes[] = {"cuda_stream", "ptr", "handle"};
  for (size_t i = 0; i < sizeof attributes / sizeof attributes[0]; i++) {
    PyObject *value = PyObject_GetAttrString(object, attributes[i]);
    if (!value) {
      PyErr_Clear(); /* no such attribute: try the next kind of stream */
      continue;
    }
    int ok = handle_value(value, stream);
    Py_DECREF(value);
    return ok;
  }
  PyErr_Format(gpumem_py_invalid_error,
               "a stream must be None, an int (a CUstream/cudaStream_t value), an object with "
               "__cuda_stream__, a cuda.bindings CUstream or a stream object of CuPy, Numba or "
               "PyTorch; got %R",
               object);
  return 0;
}

/* stream_create(device=None) -> the handle of a new non-blocking stream */
static PyObject *py_stream_create(PyObject *self, PyObject *args) {
  PyObject *device_object = Py_None;
  int device;
  if (!PyArg_ParseTuple(args, "|O", &device_object) || !gpumem_py_device(device_object, &device))
    return NULL;
  gpumem_stream stream = NULL;
  gpumem_status status = gpumem_stream_create(device, &stream);
  return status == GPUMEM_OK ? PyLong_FromVoidPtr(stream) : gpumem_py_raise(status);
}

/* stream_destroy(handle): for a stream stream_create made; its pending work still runs. */
static PyObject *py_stream_destroy(PyObject *self, PyObject *arg) {
  gpumem_stream stream;
  if (!gpumem_py_stream(arg, &stream))
    return NULL;
  gpumem_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = gpumem_stream_destroy(stream);
  Py_END_ALLOW_THREADS;
  return gpumem_py_none_or_raise(status);
}

/* stream_handle(stream) -> int: the CUstream value of anything gpumem takes as a stream */
static PyObject *py_stream_handle(PyObject *self, PyObject *arg) {
  gpumem_stream stream;
  return gpumem_py_stream(arg, &stream) ? PyLong_FromVoidPtr(stream) : NULL;
}

PyMethodDef gpumem_py_stream_functions[] = {
    {"stream_create", py_stream_create, METH_VARARGS,
     "stream_create(device=None) -> handle of a new non-blocking stream"},
    {"stream_destroy", py_stream_destroy, METH_O, "stream_destroy(handle)"},
    {"stream_handle", py_stream_handle, METH_O,
     "stream_handle(stream) -> int: the CUstream value of any stream gpumem accepts"},
    {NULL, NULL, 0, NULL},
};
