/* callbacks.c: resources and adaptors whose functions are Python callables
 * (gpumem.mr.CallbackMemoryResource, gpumem.mr.FailureCallbackResourceAdaptor), built on the
 * C library's user resources and failure callback adaptor.
 *
 * The trampolines take the GIL themselves (PyGILState_Ensure): an allocation may come from a
 * thread that does not hold it, such as PyTorch's allocator hook. The callables are owned
 * by the C resource (released by its destroy hook, at its last release), so that they live
 * exactly as long as it does, also when only a pool over it is left.
 *
 * An exception raised in a callback becomes a failure status in C (MemoryError: out of
 * memory, which pools and the failure callback adaptor act on; anything else:
 * GPUMEM_ERR_CALLBACK) and is kept for the thread. When the allocation was asked from Python
 * (gpumem_py_call_enter was called), gpumem_py_raise raises that very exception to the
 * caller instead of a GpumemError. With no Python caller to give it to (a framework's hook
 * on a thread of its own), it goes to sys.unraisablehook at once.
 *
 * While any such resource exists, every gpumem call the extension makes on a resource
 * releases the GIL (GPUMEM_PY_CALL): a pool holds its lock across its upstream's allocate,
 * and a callback waiting there for the GIL must not wait for a thread that holds the GIL
 * while it waits for that lock. */
#include "lib.h"

#include "core/internal.h"

atomic_int gpumem_py_callbacks_alive;

/* Python calls into gpumem in progress on this thread, and the exception a callback raised
 * during them (made at depth `pending_depth`). */
static _Thread_local int call_depth;
static _Thread_local PyObject *pending;
static _Thread_local int pending_depth;

static void drop_pending(void) {
  Py_CLEAR(pending);
}

void gpumem_py_call_enter(void) {
  if (call_depth == 0)
    drop_pending(); /* what an earlier call left and nobody raised */
  call_depth++;
}

void gpumem_py_call_leave(gpumem_status status) {
  call_depth--;
  if (call_depth == 0 && status == GPUMEM_OK)
    drop_pending(); /* a failure that was absorbed (a pool retried, a callback said yes) */
}

int gpumem_py_restore_callback_error(void) {
  if (!pending || pending_depth <= call_depth)
    return 0;
  PyObject *value = pending;
  pending = NULL;
  PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(value)), value, PyException_GetTraceback(value));
  return 1;
}

void gpumem_py_report_unraisable(gpumem_status status, PyObject *object) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  gpumem_py_raise(status);
  PyErr_WriteUnraisable(object);
  PyErr_Restore(type, value, traceback);
}

/* Takes the exception being raised: kept for the Python caller, or reported as unraisable
 * where there is none. Sets the thread's gpumem message and returns the status that stands
 * for it. With the GIL held. */
static gpumem_status keep_exception(const char *what, PyObject *callable) {
  gpumem_status status =
      PyErr_ExceptionMatches(PyExc_MemoryError) ? GPUMEM_ERR_OUT_OF_MEMORY : GPUMEM_ERR_CALLBACK;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback)
    PyException_SetTraceback(value, traceback);
  PyObject *text = PyObject_Str(value);
  const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
  if (!message)
    PyErr_Clear();
  gpumem__fail(status, "the Python %s callback raised %s: %s", what, Py_TYPE(value)->tp_name,
               message ? message : "(no message)");
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  if (call_depth == 0) {
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(value)), value, PyException_GetTraceback(value));
    PyErr_WriteUnraisable(callable);
    return status;
  }
  if (pending && pending != value) { /* raised while the earlier one was pending */
    PyObject *context = PyException_GetContext(value);
    if (!context)
      PyException_SetContext(value, Py_NewRef(pending));
    Py_XDECREF(context);
  }
  Py_XSETREF(pending, value);
  pending_depth = call_depth;
  return status;
}

static int interpreter_alive(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

/* ---------------------------------------------------------------------------------------
 * CallbackMemoryResource
 * ------------------------------------------------------------------------------------- */

typedef struct callback_functions {
  PyObject *allocate, *deallocate; /* owned */
} callback_functions;

static PyObject *stream_value(gpumem_stream stream) {
  return PyLong_FromVoidPtr((void *)stream); /* 0 is the default stream */
}

static gpumem_status py_allocate(void *state, size_t bytes, size_t alignment, gpumem_stream stream,
                                 void **ptr) {
  callback_functions *f = state;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *saved[3]; /* an exception on its way up (a destructor running now) */
  PyErr_Fetch(&saved[0], &saved[1], &saved[2]);
  gpumem_status status = GPUMEM_OK;
  PyObject *result =
      PyObject_CallFunction(f->allocate, "(nN)", (Py_ssize_t)bytes, stream_value(stream));
  if (result && !PyLong_Check(result)) {
    PyErr_Format(PyExc_TypeError,
                 "the allocate function of a CallbackMemoryResource must return an int "
                 "(a device pointer), not %.100s",
                 Py_TYPE(result)->tp_name);
    Py_CLEAR(result);
  }
  void *value = result ? PyLong_AsVoidPtr(result) : NULL;
  if (!result || PyErr_Occurred())
    status = keep_exception("allocate", f->allocate);
  else
    *ptr = value;
  Py_XDECREF(result);
  PyErr_Restore(saved[0], saved[1], saved[2]);
  PyGILState_Release(gil);
  return status;
}

static gpumem_status py_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                   gpumem_stream stream) {
  callback_functions *f = state;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *saved[3];
  PyErr_Fetch(&saved[0], &saved[1], &saved[2]);
  gpumem_status status = GPUMEM_OK;
  PyObject *result = PyObject_CallFunction(f->deallocate, "(NnN)", PyLong_FromVoidPtr(ptr),
                                           (Py_ssize_t)bytes, stream_value(stream));
  if (!result)
    status = keep_exception("deallocate", f->deallocate);
  Py_XDECREF(result);
  PyErr_Restore(saved[0], saved[1], saved[2]);
  PyGILState_Release(gil);
  return status;
}

static void py_destroy_functions(void *state) {
  callback_functions *f = state;
  if (interpreter_alive()) { /* at exit the objects go with the interpreter */
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(f->allocate);
    Py_XDECREF(f->deallocate);
    PyGILState_Release(gil);
  }
  PyMem_RawFree(f);
  atomic_fetch_sub(&gpumem_py_callbacks_alive, 1);
}

/* init_callback(self, allocate_func, deallocate_func, device) */
static PyObject *py_init_callback(PyObject *module, PyObject *args) {
  PyObject *object, *allocate, *deallocate, *device_object;
  int device;
  if (!PyArg_ParseTuple(args, "OOOO", &object, &allocate, &deallocate, &device_object) ||
      !gpumem_py_device(device_object, &device))
    return NULL;
  if (!PyCallable_Check(allocate) || !PyCallable_Check(deallocate))
    return PyErr_Format(PyExc_TypeError,
                        "CallbackMemoryResource needs two callables, allocate_func(size, "
                        "stream) and deallocate_func(ptr, size, stream)");
  callback_functions *f = PyMem_RawMalloc(sizeof *f);
  if (!f)
    return PyErr_NoMemory();
  f->allocate = Py_NewRef(allocate);
  f->deallocate = Py_NewRef(deallocate);
  atomic_fetch_add(&gpumem_py_callbacks_alive, 1);
  gpumem_user_resource_ops ops = {
      .size = sizeof ops,
      .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
      .allocate = py_allocate,
      .deallocate = py_deallocate,
      .destroy = py_destroy_functions,
      .memory = GPUMEM_MEMORY_DEVICE,
      .stream_ordered = 0,
      .name = "callback",
  };
  gpumem_resource *mr = NULL;
  gpumem_status status = gpumem_user_resource_create(device, &ops, f, &mr);
  if (status != GPUMEM_OK) {
    py_destroy_functions(f);
    return gpumem_py_raise(status);
  }
  return gpumem_py_store_resource(object, mr);
}

/* ---------------------------------------------------------------------------------------
 * FailureCallbackResourceAdaptor
 * ------------------------------------------------------------------------------------- */

static int py_failure_callback(size_t bytes, void *user) {
  PyObject *callback = user;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *saved[3];
  PyErr_Fetch(&saved[0], &saved[1], &saved[2]);
  PyObject *result = PyObject_CallFunction(callback, "(n)", (Py_ssize_t)bytes);
  int again = result ? PyObject_IsTrue(result) : -1;
  if (again < 0) {
    keep_exception("failure", callback);
    again = 0;
  }
  Py_XDECREF(result);
  PyErr_Restore(saved[0], saved[1], saved[2]);
  PyGILState_Release(gil);
  return again;
}

static void py_release_callback(void *user) {
  if (interpreter_alive()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)user);
    PyGILState_Release(gil);
  }
  atomic_fetch_sub(&gpumem_py_callbacks_alive, 1);
}

/* init_failure_callback(self, upstream, callback) */
static PyObject *py_init_failure_callback(PyObject *module, PyObject *args) {
  PyObject *object, *upstream_object, *callback;
  gpumem_resource *upstream;
  if (!PyArg_ParseTuple(args, "OOO", &object, &upstream_object, &callback) ||
      !(upstream = gpumem_py_resource_handle(upstream_object)))
    return NULL;
  if (!PyCallable_Check(callback))
    return PyErr_Format(PyExc_TypeError,
                        "FailureCallbackResourceAdaptor needs a callable callback(nbytes) -> "
                        "bool, not %R",
                        callback);
  atomic_fetch_add(&gpumem_py_callbacks_alive, 1);
  gpumem_failure_callback_options options = {
      .callback = py_failure_callback,
      .user = Py_NewRef(callback),
      .destroy = py_release_callback,
  };
  gpumem_resource *mr = NULL;
  gpumem_status status = gpumem_failure_callback_create(upstream, &options, &mr);
  if (status != GPUMEM_OK) {
    py_release_callback(callback);
    return gpumem_py_raise(status);
  }
  return gpumem_py_store_resource(object, mr);
}

PyMethodDef gpumem_py_callback_functions[] = {
    {"init_callback", py_init_callback, METH_VARARGS,
     "init_callback(mr, allocate_func, deallocate_func, device)"},
    {"init_failure_callback", py_init_failure_callback, METH_VARARGS,
     "init_failure_callback(mr, upstream, callback)"},
    {NULL, NULL, 0, NULL},
};
