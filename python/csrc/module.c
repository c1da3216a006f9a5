/* module.c: the gpumem._lib extension module: its exceptions, the conversions every other
 * file uses, and the functions about devices, backends, sizes, the current resource and
 * reinitialization. The Python package (the .py files of gpumem/) puts RMM's names on top. */
#include "lib.h"

#include "core/internal.h"
#include "gpumem/sim.h"

PyObject *gpumem_py_error, *gpumem_py_oom_error, *gpumem_py_invalid_error;
PyObject *gpumem_py_allocation_error;

/* An out-of-memory message that ends with a report (the library's lines after the first,
 * ending "verdict: WORD: ..."): the exception being raised gets it as .report and WORD as
 * .verdict (the class's None otherwise). */
static void attach_report(const char *message) {
  const char *report = strchr(message, '\n');
  const char *last = strrchr(message, '\n');
  if (!report || strncmp(last + 1, "verdict: ", 9) != 0)
    return;
  const char *word = last + 10;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyObject *text = PyUnicode_DecodeUTF8(report + 1, (Py_ssize_t)strlen(report + 1), "replace");
  PyObject *verdict = PyUnicode_FromStringAndSize(word, (Py_ssize_t)strcspn(word, ":"));
  if (!text || !verdict || PyObject_SetAttrString(value, "report", text) < 0 ||
      PyObject_SetAttrString(value, "verdict", verdict) < 0)
    PyErr_Clear(); /* the exception stands without them */
  Py_XDECREF(text);
  Py_XDECREF(verdict);
  PyErr_Restore(type, value, traceback);
}

static PyObject *raise_status(gpumem_status status, int allocation) {
  if (gpumem_py_restore_callback_error())
    return NULL;
  PyObject *type = gpumem_py_error;
  if (allocation && status == GPUMEM_ERR_CUDA)
    type = gpumem_py_allocation_error;
  else if (status == GPUMEM_ERR_OUT_OF_MEMORY)
    type = gpumem_py_oom_error;
  else if (status == GPUMEM_ERR_INVALID_ARGUMENT || status == GPUMEM_ERR_INVALID_DEVICE ||
           status == GPUMEM_ERR_INVALID_STREAM)
    type = gpumem_py_invalid_error;
  const char *message = gpumem_last_error_message();
  PyErr_Format(type, "%s: %s", gpumem_status_name(status),
               *message ? message : gpumem_status_string(status));
  if (status == GPUMEM_ERR_OUT_OF_MEMORY)
    attach_report(message);
  return NULL;
}

PyObject *gpumem_py_raise(gpumem_status status) {
  return raise_status(status, 0);
}

PyObject *gpumem_py_raise_allocation(gpumem_status status) {
  return raise_status(status, 1);
}

PyObject *gpumem_py_none_or_raise(gpumem_status status) {
  return status == GPUMEM_OK ? Py_NewRef(Py_None) : gpumem_py_raise(status);
}

int gpumem_py_device(PyObject *object, int *device) {
  if (object == NULL || object == Py_None) {
    *device = GPUMEM_CURRENT_DEVICE;
    return 1;
  }
  long value = PyLong_AsLong(object);
  if (value == -1 && PyErr_Occurred())
    return 0;
  *device = (int)value;
  return 1;
}

/* ---------------------------------------------------------------------------------------
 * Backends and devices
 * ------------------------------------------------------------------------------------- */

static PyObject *py_select_backend(PyObject *self, PyObject *name) {
  const char *text = PyUnicode_AsUTF8(name);
  if (!text)
    return NULL;
  gpumem_backend backend = !strcmp(text, "sim")    ? GPUMEM_BACKEND_SIM
                           : !strcmp(text, "cuda") ? GPUMEM_BACKEND_CUDA
                                                   : (gpumem_backend)-1;
  if ((int)backend == -1)
    return PyErr_Format(gpumem_py_invalid_error, "backend must be 'cuda' or 'sim', not %R", name);
  gpumem_status status = gpumem_select_backend(backend);
  return gpumem_py_none_or_raise(status);
}

static PyObject *py_backend_name(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(gpumem_backend_name());
}

static PyObject *py_version(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(gpumem_version());
}

static PyObject *py_init(PyObject *self, PyObject *unused) {
  gpumem_status status = gpumem_init();
  return gpumem_py_none_or_raise(status);
}

static PyObject *py_settings(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(gpumem_settings());
}

static PyObject *py_device_count(PyObject *self, PyObject *unused) {
  int count = 0;
  gpumem_status status = gpumem_device_count(&count);
  return status == GPUMEM_OK ? PyLong_FromLong(count) : gpumem_py_raise(status);
}

static PyObject *py_get_device(PyObject *self, PyObject *unused) {
  int device = 0;
  gpumem_status status = gpumem_get_device(&device);
  return status == GPUMEM_OK ? PyLong_FromLong(device) : gpumem_py_raise(status);
}

static PyObject *py_set_device(PyObject *self, PyObject *arg) {
  int device;
  if (!gpumem_py_device(arg, &device))
    return NULL;
  gpumem_status status = gpumem_set_device(device);
  return gpumem_py_none_or_raise(status);
}

static PyObject *py_memory_info(PyObject *self, PyObject *args) {
  PyObject *device_object = Py_None;
  if (!PyArg_ParseTuple(args, "|O", &device_object))
    return NULL;
  int device;
  if (!gpumem_py_device(device_object, &device))
    return NULL;
  size_t free_bytes = 0, total_bytes = 0;
  gpumem_status status = gpumem_device_memory_info(device, &free_bytes, &total_bytes);
  if (status != GPUMEM_OK)
    return gpumem_py_raise(status);
  return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total_bytes);
}

static PyObject *py_device_name(PyObject *self, PyObject *args) {
  PyObject *device_object = Py_None;
  if (!PyArg_ParseTuple(args, "|O", &device_object))
    return NULL;
  int device;
  if (!gpumem_py_device(device_object, &device))
    return NULL;
  char name[256];
  gpumem_status status = gpumem_device_name(device, name, sizeof name);
  return status == GPUMEM_OK ? PyUnicode_FromString(name) : gpumem_py_raise(status);
}

int gpumem_py_synchronize(gpumem_stream stream) {
  gpumem_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = gpumem_stream_synchronize(stream);
  Py_END_ALLOW_THREADS;
  if (status == GPUMEM_OK)
    return 1;
  gpumem_py_raise(status);
  return 0;
}

static PyObject *py_synchronize(PyObject *self, PyObject *args) {
  PyObject *stream_object = Py_None;
  gpumem_stream stream;
  if (!PyArg_ParseTuple(args, "|O", &stream_object) || !gpumem_py_stream(stream_object, &stream))
    return NULL;
  return gpumem_py_synchronize(stream) ? Py_NewRef(Py_None) : NULL;
}

/* ---------------------------------------------------------------------------------------
 * Sizes, reinitialize, the current resource
 * ------------------------------------------------------------------------------------- */

/* parse_size(text, device=None): "1GiB", "512M", "50%" (of the device's total memory). */
static PyObject *py_parse_size(PyObject *self, PyObject *args) {
  const char *text;
  PyObject *device_object = Py_None;
  if (!PyArg_ParseTuple(args, "s|O", &text, &device_object))
    return NULL;
  uint64_t total = 0;
  if (strchr(text, '%')) {
    int device;
    size_t free_bytes, total_bytes;
    if (!gpumem_py_device(device_object, &device))
      return NULL;
    gpumem_status status = gpumem_device_memory_info(device, &free_bytes, &total_bytes);
    if (status != GPUMEM_OK)
      return gpumem_py_raise(status);
    total = total_bytes;
  }
  uint64_t value;
  size_t used;
  if (!gpumem__parse_size(text, total, &value, &used) || text[used] != '\0')
    return PyErr_Format(gpumem_py_invalid_error,
                        "Could not parse %R as a size (write e.g. 1000000, \"512MiB\", "
                        "\"1GiB\" or \"50%%\")",
                        PyTuple_GET_ITEM(args, 0));
  return PyLong_FromUnsignedLongLong(value);
}

/* gpumem_reinitialize for the devices of a list; log_name NULL: no logging. */
static PyObject *reinitialize_devices(int pool, int managed, unsigned long long initial,
                                      unsigned long long maximum, PyObject *devices,
                                      const char *log_name) {
  Py_ssize_t count = PyList_GET_SIZE(devices);
  if (count > GPUMEM_MAX_DEVICES)
    return PyErr_Format(gpumem_py_invalid_error, "at most %d devices", GPUMEM_MAX_DEVICES);
  int list[GPUMEM_MAX_DEVICES];
  for (Py_ssize_t i = 0; i < count; i++) {
    list[i] = (int)PyLong_AsLong(PyList_GET_ITEM(devices, i));
    if (PyErr_Occurred())
      return NULL;
  }
  gpumem_reinitialize_options options = {.pool_allocator = pool,
                                         .managed_memory = managed,
                                         .initial_pool_size = (size_t)initial,
                                         .maximum_pool_size = (size_t)maximum,
                                         .devices = list,
                                         .device_count = (size_t)count,
                                         .logging = log_name != NULL,
                                         .log_file_name = log_name};
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_reinitialize(&options));
  return gpumem_py_none_or_raise(status);
}

/* reinitialize(pool_allocator, managed_memory, initial_pool_size, maximum_pool_size, devices,
 *              log_file_name=None): a log file name (not None) turns logging on */
static PyObject *py_reinitialize(PyObject *self, PyObject *args) {
  int pool, managed;
  unsigned long long initial, maximum;
  PyObject *devices, *log_name = NULL;
  if (!PyArg_ParseTuple(args, "ppKKO!|O&", &pool, &managed, &initial, &maximum, &PyList_Type,
                        &devices, PyUnicode_FSConverter, &log_name))
    return NULL;
  PyObject *result = reinitialize_devices(pool, managed, initial, maximum, devices,
                                          log_name ? PyBytes_AS_STRING(log_name) : NULL);
  Py_XDECREF(log_name);
  return result;
}

/* get_per_device_resource(device): a base Resource object holding its own reference. */
static PyObject *py_get_per_device_resource(PyObject *self, PyObject *arg) {
  int device;
  if (!gpumem_py_device(arg, &device))
    return NULL;
  gpumem_resource *mr;
  gpumem_status status = gpumem_get_per_device_resource(device, &mr);
  return status == GPUMEM_OK ? gpumem_py_wrap_resource(mr) : gpumem_py_raise(status);
}

/* set_per_device_resource(device, mr or None) */
static PyObject *py_set_per_device_resource(PyObject *self, PyObject *args) {
  PyObject *device_object, *resource;
  if (!PyArg_ParseTuple(args, "OO", &device_object, &resource))
    return NULL;
  int device;
  if (!gpumem_py_device(device_object, &device))
    return NULL;
  gpumem_resource *mr = NULL;
  if (resource != Py_None && !(mr = gpumem_py_resource_handle(resource)))
    return NULL;
  if (device == GPUMEM_CURRENT_DEVICE && mr)
    device = gpumem_resource_device(mr);
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_set_per_device_resource(device, mr));
  return gpumem_py_none_or_raise(status);
}

/* ---------------------------------------------------------------------------------------
 * The simulated device, for tests
 * ------------------------------------------------------------------------------------- */

static PyObject *py_sim_complete_all(PyObject *self, PyObject *unused) {
  gpumem_status status = gpumem_sim_complete_all();
  return gpumem_py_none_or_raise(status);
}

static PyObject *py_sim_hazard_count(PyObject *self, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(gpumem_sim_hazard_count());
}

static PyMethodDef module_functions[] = {
    {"select_backend", py_select_backend, METH_O, "select_backend('sim' | 'cuda'), before use"},
    {"backend_name", py_backend_name, METH_NOARGS, "the backend in use: 'cuda' or 'sim'"},
    {"version", py_version, METH_NOARGS, "the C library's version, as gpumem_version()"},
    {"init", py_init, METH_NOARGS, "initializes the backend now"},
    {"settings", py_settings, METH_NOARGS, "the effective settings, as text"},
    {"device_count", py_device_count, METH_NOARGS, "number of devices"},
    {"get_device", py_get_device, METH_NOARGS, "the current device of this thread"},
    {"set_device", py_set_device, METH_O, "makes a device current on this thread"},
    {"memory_info", py_memory_info, METH_VARARGS, "memory_info(device=None) -> (free, total)"},
    {"device_name", py_device_name, METH_VARARGS, "device_name(device=None)"},
    {"synchronize", py_synchronize, METH_VARARGS, "synchronize(stream=None)"},
    {"parse_size", py_parse_size, METH_VARARGS, "parse_size(text, device=None) -> bytes"},
    {"reinitialize", py_reinitialize, METH_VARARGS, "see gpumem.reinitialize"},
    {"get_per_device_resource", py_get_per_device_resource, METH_O,
     "the device's current resource"},
    {"set_per_device_resource", py_set_per_device_resource, METH_VARARGS,
     "set_per_device_resource(device, mr or None)"},
    {"sim_complete_all", py_sim_complete_all, METH_NOARGS,
     "simulated device: runs all pending work"},
    {"sim_hazard_count", py_sim_hazard_count, METH_NOARGS,
     "simulated device: cross-stream hazards seen"},
    {NULL, NULL, 0, NULL},
};

static int add_functions(PyObject *module, PyMethodDef *functions) {
  for (PyMethodDef *f = functions; f->ml_name; f++) {
    PyObject *function = PyCFunction_NewEx(f, NULL, PyModule_GetNameObject(module));
    if (!function || PyModule_AddObject(module, f->ml_name, function) < 0)
      return -1;
  }
  return 0;
}

static int add_exceptions(PyObject *module) {
  gpumem_py_error = PyErr_NewExceptionWithDoc("gpumem.GpumemError", "A gpumem call failed.",
                                              PyExc_RuntimeError, NULL);
  PyObject *oom_bases = Py_BuildValue("(OO)", gpumem_py_error, PyExc_MemoryError);
  PyObject *invalid_bases = Py_BuildValue("(OO)", gpumem_py_error, PyExc_ValueError);
  if (!gpumem_py_error || !oom_bases || !invalid_bases)
    return -1;
  /* .report and .verdict: None unless the failure came with a report (attach_report). */
  PyObject *oom_attributes = Py_BuildValue("{sOsO}", "report", Py_None, "verdict", Py_None);
  if (!oom_attributes)
    return -1;
  gpumem_py_oom_error = PyErr_NewExceptionWithDoc(
      "gpumem.OutOfMemoryError",
      "A resource had no memory for a request. .report: the resources' figures and the verdict "
      "(the message's lines after the first), .verdict: its word ('fragmentation', "
      "'limit_reached', 'device_full', 'host_failure', ...); None without a report.",
      oom_bases, oom_attributes);
  Py_DECREF(oom_attributes);
  gpumem_py_invalid_error = PyErr_NewExceptionWithDoc(
      "gpumem.InvalidArgumentError", "A bad argument, device or stream.", invalid_bases, NULL);
  gpumem_py_allocation_error = PyErr_NewExceptionWithDoc(
      "gpumem.AllocationError",
      "The device refused an allocation for another reason than lack of memory (a driver "
      "error: a driver pool destroyed under its resource, say). A MemoryError, as every "
      "failed allocation is in Python.",
      oom_bases, NULL);
  Py_DECREF(oom_bases);
  Py_DECREF(invalid_bases);
  if (!gpumem_py_oom_error || !gpumem_py_invalid_error || !gpumem_py_allocation_error)
    return -1;
  if (PyModule_AddObjectRef(module, "AllocationError", gpumem_py_allocation_error) < 0)
    return -1;
  return PyModule_AddObjectRef(module, "GpumemError", gpumem_py_error) < 0 ||
                 PyModule_AddObjectRef(module, "OutOfMemoryError", gpumem_py_oom_error) < 0 ||
                 PyModule_AddObjectRef(module, "InvalidArgumentError", gpumem_py_invalid_error) < 0
             ? -1
             : 0;
}

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gpumem._lib",
    .m_doc = "The C library of gpumem and the Python objects over it; use the gpumem package.",
    .m_size = -1,
    .m_methods = module_functions,
};

PyMODINIT_FUNC PyInit__lib(void) {
  PyObject *module = PyModule_Create(&module_definition);
  if (!module)
    return NULL;
  if (add_exceptions(module) < 0 || add_functions(module, gpumem_py_resource_functions) < 0 ||
      add_functions(module, gpumem_py_buffer_functions) < 0 ||
      add_functions(module, gpumem_py_hook_functions) < 0 ||
      add_functions(module, gpumem_py_callback_functions) < 0 ||
      add_functions(module, gpumem_py_log_functions) < 0 ||
      add_functions(module, gpumem_py_stream_functions) < 0 ||
      PyType_Ready(&gpumem_py_resource_type) < 0 || PyType_Ready(&gpumem_py_buffer_type) < 0 ||
      PyType_Ready(&gpumem_py_allocation_type) < 0 ||
      PyModule_AddObjectRef(module, "Resource", (PyObject *)&gpumem_py_resource_type) < 0 ||
      PyModule_AddObjectRef(module, "DeviceBuffer", (PyObject *)&gpumem_py_buffer_type) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
