/* lib.h: what the files of gpumem's Python extension (gpumem._lib) share.
 *
 * The extension is a thin C layer over the C library, which is compiled into it: Python
 * objects for resources and device buffers, conversion of Python values (streams, sizes)
 * to C, errors turned into exceptions that carry the library's message, and the hook-ups
 * that CuPy and PyTorch call without going through any Python code of ours. */
#ifndef GPUMEM_PYTHON_LIB_H
#define GPUMEM_PYTHON_LIB_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gpumem.h"

#include <stdatomic.h>

/* Exceptions: GpumemError(RuntimeError), OutOfMemoryError(GpumemError, MemoryError),
 * InvalidArgumentError(GpumemError, ValueError), AllocationError(GpumemError, MemoryError). */
extern PyObject *gpumem_py_error, *gpumem_py_oom_error, *gpumem_py_invalid_error;
extern PyObject *gpumem_py_allocation_error;

/* ---- calls that may run Python callbacks (callbacks.c) ---- */

/* The resources and adaptors with Python callbacks that exist now. */
extern atomic_int gpumem_py_callbacks_alive;

/* Around a gpumem call made for a Python caller while callbacks exist: the exception a
 * callback raises during it is kept for gpumem_py_raise. */
void gpumem_py_call_enter(void);
void gpumem_py_call_leave(gpumem_status status);

/* Restores the exception a Python callback raised during the call just made for this
 * thread's Python caller: 1 when there was one (it is being raised now), else 0. */
int gpumem_py_restore_callback_error(void);

/* For destructors: reports the failure of a call (or the exception a callback raised in it)
 * through sys.unraisablehook, leaving any exception being raised as it was. */
void gpumem_py_report_unraisable(gpumem_status status, PyObject *object);

/* Runs `call` as `status = call` without the GIL, keeping a Python callback's exception for
 * gpumem_py_raise: for calls that wait for the device, and for GPUMEM_PY_CALL below. */
#define GPUMEM_PY_CALL_WITHOUT_GIL(status, call)                                                   \
  do {                                                                                             \
    gpumem_py_call_enter();                                                                        \
    Py_BEGIN_ALLOW_THREADS(status) = (call);                                                       \
    Py_END_ALLOW_THREADS gpumem_py_call_leave(status);                                             \
  } while (0)

/* Runs `call`, a gpumem call on a resource, as `status = call`. While resources with Python
 * callbacks exist it releases the GIL for the call (a callback run inside it, under a
 * pool's lock, takes the GIL back: holding the GIL while waiting for that lock would
 * deadlock) and keeps a callback's exception for gpumem_py_raise. Otherwise it costs one
 * atomic load. */
#define GPUMEM_PY_CALL(status, call)                                                               \
  do {                                                                                             \
    if (atomic_load_explicit(&gpumem_py_callbacks_alive, memory_order_relaxed) == 0) {             \
      (status) = (call);                                                                           \
    } else {                                                                                       \
      GPUMEM_PY_CALL_WITHOUT_GIL(status, call);                                                    \
    }                                                                                              \
  } while (0)

/* Raises the exception for `status` with the library's message (or the exception a Python
 * callback raised during the call, see callbacks.c); returns NULL. */
PyObject *gpumem_py_raise(gpumem_status status);
/* As gpumem_py_raise for the failure of an allocation: a driver error (GPUMEM_ERR_CUDA)
 * raises AllocationError, a MemoryError, as any failed allocation does in Python (and in
 * RMM); other statuses as gpumem_py_raise. */
PyObject *gpumem_py_raise_allocation(gpumem_status status);
/* None for GPUMEM_OK, else raises as gpumem_py_raise: the result of a call returning
 * nothing. */
PyObject *gpumem_py_none_or_raise(gpumem_status status);

/* Waits for the stream's work with the GIL released: 1, or 0 with the exception raised. */
int gpumem_py_synchronize(gpumem_stream stream);

/* A stream given as None, an int, an object with __cuda_stream__ (gpumem.Stream, cuda.core,
 * recent Numba), a CuPy (.ptr), PyTorch (.cuda_stream) or Numba (.handle) stream, or a
 * cuda.bindings CUstream/cudaStream_t (see stream.c). Returns 0 and sets an exception when
 * it is none of those. */
int gpumem_py_stream(PyObject *object, gpumem_stream *stream);
/* Module-level functions of stream.c (stream_create, stream_destroy, stream_handle). */
extern PyMethodDef gpumem_py_stream_functions[];

/* A device index given as None (the current device) or an int. */
int gpumem_py_device(PyObject *object, int *device);

/* ---- resources ---- */

typedef struct gpumem_py_resource {
  PyObject_HEAD gpumem_resource *mr; /* one reference, released at deallocation */
  PyObject *dict;                    /* for subclasses' attributes (kept upstreams) */
} gpumem_py_resource;

extern PyTypeObject gpumem_py_resource_type;

/* A new base Resource object holding a new reference to mr (retained here). */
PyObject *gpumem_py_wrap_resource(gpumem_resource *mr);
/* The handle of a Resource object; NULL with an exception when it is not one, or empty. */
gpumem_resource *gpumem_py_resource_handle(PyObject *object);

/* Stores a new resource in an empty Resource object (consuming the reference): None, or
 * NULL with an exception (mr released) when the object is not an empty Resource. */
PyObject *gpumem_py_store_resource(PyObject *object, gpumem_resource *mr);

/* Module-level functions that build resources into existing objects (see resource.c). */
extern PyMethodDef gpumem_py_resource_functions[];
/* ... and those of callbacks.c. */
extern PyMethodDef gpumem_py_callback_functions[];
/* ... and those of log.c (LoggingResourceAdaptor). */
extern PyMethodDef gpumem_py_log_functions[];

/* ---- device buffers ---- */

extern PyTypeObject gpumem_py_buffer_type;
extern PyMethodDef gpumem_py_buffer_functions[];

/* ---- hook-ups ---- */

extern PyTypeObject gpumem_py_allocation_type;
extern PyMethodDef gpumem_py_hook_functions[];

#endif /* GPUMEM_PYTHON_LIB_H */
