/* hooks.c: the hook-ups that let CuPy and PyTorch allocate through gpumem with no Python
 * code of ours on the allocation path.
 *
 * CuPy: cupy_allocator(nbytes) is a function written in C, given to cupy.cuda.set_allocator.
 * It asks CuPy for its current stream through the C function CuPy's stream module exports
 * (cupy.cuda.stream.__pyx_capi__["get_current_stream_ptr"]), allocates from the current
 * device's resource, and wraps the block in CuPy's UnownedMemory and MemoryPointer, with an
 * Allocation object as owner that frees the block, on that stream, when CuPy lets it go.
 *
 * PyTorch: gpumem_torch_alloc and gpumem_torch_free are exported from this extension's
 * shared object with the signatures torch.cuda.memory.CUDAPluggableAllocator loads; they
 * use each device's current resource and never touch Python. */
#include "lib.h"

/* ---------------------------------------------------------------------------------------
 * Allocation: the owner of one block handed to a framework
 * ------------------------------------------------------------------------------------- */

typedef struct py_allocation {
  PyObject_HEAD gpumem_resource *mr; /* retained */
  void *ptr;
  size_t size;
  gpumem_stream stream;
} py_allocation;

static void allocation_dealloc(py_allocation *self) {
  if (self->mr) {
    gpumem_status status;
    GPUMEM_PY_CALL(status, gpumem_deallocate(self->mr, self->ptr, self->size, self->stream));
    if (status != GPUMEM_OK)
      gpumem_py_report_unraisable(status, (PyObject *)self);
    gpumem_resource_release(self->mr);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *allocation_ptr(py_allocation *self, void *closure) {
  return PyLong_FromVoidPtr(self->ptr);
}

static PyObject *allocation_size(py_allocation *self, void *closure) {
  return PyLong_FromSize_t(self->size);
}

static PyGetSetDef allocation_getset[] = {
    {"ptr", (getter)allocation_ptr, NULL, "device address", NULL},
    {"size", (getter)allocation_size, NULL, "bytes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject gpumem_py_allocation_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpumem.Allocation",
    .tp_doc = "One block allocated for a framework; freed when this object goes.",
    .tp_basicsize = sizeof(py_allocation),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)allocation_dealloc,
    .tp_getset = allocation_getset,
};

/* ---------------------------------------------------------------------------------------
 * CuPy
 * ------------------------------------------------------------------------------------- */

/* Cython exports a module-level cpdef function with a flag argument (skip_dispatch), which
 * the capsule's name shows; older exports take none. */
typedef intptr_t (*current_stream_fn)(void);
typedef intptr_t (*current_stream_flag_fn)(int skip_dispatch);

/* What the CuPy hook needs from CuPy, looked up once. */
static struct {
  current_stream_fn current_stream;
  current_stream_flag_fn current_stream_with_flag; /* instead, when exported that way */
  PyObject *unowned_memory, *memory_pointer;
} cupy;

static int load_cupy(void) {
  if (cupy.memory_pointer)
    return 1;
  PyObject *stream_module = PyImport_ImportModule("cupy.cuda.stream");
  PyObject *memory_module = stream_module ? PyImport_ImportModule("cupy.cuda.memory") : NULL;
  PyObject *capi = stream_module ? PyObject_GetAttrString(stream_module, "__pyx_capi__") : NULL;
  PyObject *capsule = capi ? PyDict_GetItemString(capi, "get_current_stream_ptr") : NULL;
  if (capi && !capsule)
    PyErr_SetString(gpumem_py_error, "this CuPy does not export get_current_stream_ptr");
  if (capsule) {
    const char *signature = PyCapsule_GetName(capsule);
    void *function = PyCapsule_GetPointer(capsule, signature);
    if (function && signature && strstr(signature, "skip_dispatch"))
      cupy.current_stream_with_flag = (current_stream_flag_fn)function;
    else if (function)
      cupy.current_stream = (current_stream_fn)function;
  }
  if ((cupy.current_stream || cupy.current_stream_with_flag) && memory_module) {
    cupy.unowned_memory = PyObject_GetAttrString(memory_module, "UnownedMemory");
    cupy.memory_pointer = PyObject_GetAttrString(memory_module, "MemoryPointer");
  }
  Py_XDECREF(capi);
  Py_XDECREF(memory_module);
  Py_XDECREF(stream_module);
  if (!cupy.unowned_memory || !cupy.memory_pointer) {
    Py_CLEAR(cupy.unowned_memory);
    Py_CLEAR(cupy.memory_pointer);
    return 0;
  }
  return 1;
}

/* An Allocation owning a new block of `nbytes` from `mr` on `stream`; NULL with an exception
 * on failure. */
static py_allocation *new_owner(gpumem_resource *mr, size_t nbytes, gpumem_stream stream) {
  py_allocation *owner = PyObject_New(py_allocation, &gpumem_py_allocation_type);
  if (!owner)
    return NULL;
  owner->mr = NULL; /* nothing to free until the block is there */
  owner->size = nbytes;
  owner->stream = stream;
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_allocate(mr, nbytes, stream, &owner->ptr));
  if (status != GPUMEM_OK) {
    Py_DECREF(owner);
    return (py_allocation *)gpumem_py_raise_allocation(status);
  }
  owner->mr = gpumem_resource_retain(mr);
  return owner;
}

/* cupy_allocator(nbytes) -> cupy.cuda.MemoryPointer, on CuPy's current stream and device. */
static PyObject *py_cupy_allocator(PyObject *module, PyObject *nbytes_object) {
  Py_ssize_t nbytes = PyLong_AsSsize_t(nbytes_object);
  if ((nbytes == -1 && PyErr_Occurred()) || !load_cupy())
    return NULL;
  /* skip_dispatch 0: a module-level function has no Python override to look for. */
  intptr_t stream =
      cupy.current_stream_with_flag ? cupy.current_stream_with_flag(0) : cupy.current_stream();
  if (stream == -1 && PyErr_Occurred())
    return NULL;
  int device = 0;
  gpumem_resource *mr;
  gpumem_status status = gpumem_get_device(&device);
  if (status == GPUMEM_OK)
    status = gpumem_get_per_device_resource(device, &mr);
  if (status != GPUMEM_OK)
    return gpumem_py_raise(status);
  py_allocation *owner = new_owner(mr, (size_t)nbytes, (gpumem_stream)stream);
  if (!owner)
    return NULL;
  PyObject *memory = PyObject_CallFunction(cupy.unowned_memory, "(NnOi)",
                                           PyLong_FromVoidPtr(owner->ptr), nbytes, owner, device);
  Py_DECREF(owner); /* the memory object keeps it */
  if (!memory)
    return NULL;
  PyObject *pointer = PyObject_CallFunction(cupy.memory_pointer, "(Oi)", memory, 0);
  Py_DECREF(memory);
  return pointer;
}

/* allocation(nbytes, stream) -> Allocation: for hook-ups written in Python (Numba), a block
 * of the current device's resource and its owner in one call. */
static PyObject *py_new_allocation(PyObject *module, PyObject *args) {
  Py_ssize_t nbytes;
  PyObject *stream_object;
  gpumem_stream stream;
  if (!PyArg_ParseTuple(args, "nO", &nbytes, &stream_object) ||
      !gpumem_py_stream(stream_object, &stream))
    return NULL;
  gpumem_resource *mr;
  gpumem_status status = gpumem_get_current_device_resource(&mr);
  if (status != GPUMEM_OK)
    return gpumem_py_raise(status);
  return (PyObject *)new_owner(mr, (size_t)nbytes, stream);
}

PyMethodDef gpumem_py_hook_functions[] = {
    {"cupy_allocator", py_cupy_allocator, METH_O,
     "cupy_allocator(nbytes) -> cupy.cuda.MemoryPointer: for cupy.cuda.set_allocator"},
    {"allocation", py_new_allocation, METH_VARARGS,
     "allocation(nbytes, stream) -> Allocation, freed when it goes"},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------------------------------
 * PyTorch (torch.cuda.memory.CUDAPluggableAllocator)
 * ------------------------------------------------------------------------------------- */

#define GPUMEM_PY_EXPORT __attribute__((visibility("default")))

GPUMEM_PY_EXPORT void *gpumem_torch_alloc(size_t size, int device, void *stream);
GPUMEM_PY_EXPORT void gpumem_torch_free(void *ptr, size_t size, int device, void *stream);

void *gpumem_torch_alloc(size_t size, int device, void *stream) {
  gpumem_resource *mr;
  void *ptr = NULL;
  if (gpumem_get_per_device_resource(device, &mr) != GPUMEM_OK ||
      gpumem_allocate(mr, size, (gpumem_stream)stream, &ptr) != GPUMEM_OK)
    return NULL; /* PyTorch reports out of memory for NULL */
  return ptr;
}

void gpumem_torch_free(void *ptr, size_t size, int device, void *stream) {
  gpumem_resource *mr;
  if (gpumem_get_per_device_resource(device, &mr) == GPUMEM_OK)
    gpumem_deallocate(mr, ptr, size, (gpumem_stream)stream);
}
