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

/* Exceptions: GpumemError(RuntimeError), OutOfMemoryError(GpumemError, MemoryError),
 * InvalidArgumentError(GpumemError, ValueError). */
extern PyObject *gpumem_py_error, *gpumem_py_oom_error, *gpumem_py_invalid_error;

/* Raises the exception for `status` with the library's message; returns NULL. */
PyObject *gpumem_py_raise(gpumem_status status);
/* None for GPUMEM_OK, else raises as gpumem_py_raise: the result of a call returning
 * nothing. */
PyObject *gpumem_py_none_or_raise(gpumem_status status);

/* Waits for the stream's work with the GIL released: 1, or 0 with the exception raised. */
int gpumem_py_synchronize(gpumem_stream stream);

/* A stream given as None, an int, or an object with a CUDA stream (cupy .ptr, torch
 * .cuda_stream, numba .handle). Returns 0 and sets an exception when it is none of those. */
int gpumem_py_stream(PyObject *object, gpumem_stream *stream);

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

/* Module-level functions that build resources into existing objects (see resource.c). */
extern PyMethodDef gpumem_py_resource_functions[];

/* ---- device buffers ---- */

extern PyTypeObject gpumem_py_buffer_type;
extern PyMethodDef gpumem_py_buffer_functions[];

/* ---- hook-ups ---- */

extern PyTypeObject gpumem_py_allocation_type;
extern PyMethodDef gpumem_py_hook_functions[];

#endif /* GPUMEM_PYTHON_LIB_H */
