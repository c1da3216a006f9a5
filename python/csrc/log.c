/* log.c: the functions of gpumem.mr.LoggingResourceAdaptor and of the logging switches of
 * gpumem.reinitialize: building a log adaptor over an upstream into a Resource object,
 * flushing it, its file's name, and giving a Resource object of a subclass the handle of
 * an existing resource (reinitialize builds the logs in C; Python gives them their class). */
#include "lib.h"

/* init_log(self, upstream, file_name) */
static PyObject *py_init_log(PyObject *module, PyObject *args) {
  PyObject *object, *upstream_object, *name_object;
  gpumem_resource *up;
  if (!PyArg_ParseTuple(args, "OOO&", &object, &upstream_object, PyUnicode_FSConverter,
                        &name_object))
    return NULL;
  if (!(up = gpumem_py_resource_handle(upstream_object))) {
    Py_DECREF(name_object);
    return NULL;
  }
  gpumem_log_options options = {.file_name = PyBytes_AS_STRING(name_object)};
  gpumem_resource *mr = NULL;
  gpumem_status status;
  GPUMEM_PY_CALL(status, gpumem_log_create(up, &options, &mr));
  Py_DECREF(name_object);
  if (status != GPUMEM_OK)
    return gpumem_py_raise(status);
  return gpumem_py_store_resource(object, mr);
}

/* log_flush(self) */
static PyObject *py_log_flush(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  gpumem_status status;
  GPUMEM_PY_CALL_WITHOUT_GIL(status, gpumem_log_flush(mr)); /* it may write a buffer out */
  return gpumem_py_none_or_raise(status);
}

/* log_file_name(self) -> str, or None when self is not a log adaptor */
static PyObject *py_log_file_name(PyObject *module, PyObject *object) {
  gpumem_resource *mr = gpumem_py_resource_handle(object);
  if (!mr)
    return NULL;
  if (strcmp(gpumem_resource_name(mr), "log") != 0)
    Py_RETURN_NONE;
  char name[4200];
  gpumem_status status = gpumem_log_file_name(mr, name, sizeof name);
  return status == GPUMEM_OK ? PyUnicode_DecodeFSDefault(name) : gpumem_py_raise(status);
}

/* adopt(self, source): self, an empty Resource object, takes a reference to source's
 * resource. */
static PyObject *py_adopt(PyObject *module, PyObject *args) {
  PyObject *object, *source;
  gpumem_resource *mr;
  if (!PyArg_ParseTuple(args, "OO", &object, &source) || !(mr = gpumem_py_resource_handle(source)))
    return NULL;
  return gpumem_py_store_resource(object, gpumem_resource_retain(mr));
}

PyMethodDef gpumem_py_log_functions[] = {
    {"init_log", py_init_log, METH_VARARGS, "init_log(mr, upstream, file_name)"},
    {"log_flush", py_log_flush, METH_O, "log_flush(mr): the file holds every event so far"},
    {"log_file_name", py_log_file_name, METH_O, "log_file_name(mr) -> the file, or None"},
    {"adopt", py_adopt, METH_VARARGS, "adopt(empty, source): empty takes source's resource"},
    {NULL, NULL, 0, NULL},
};
