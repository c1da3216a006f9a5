/* device.c: picks the device backend (cuda or sim) and initializes it once.
 *
 * The choice comes from gpumem_select_backend or gpumem_sim_configure, made before first
 * use, else from GPUMEM_DEVICE, else cuda. Initialization happens once; its outcome, good
 * or bad, stays (as CUDA's own initialization does), so every later call gets the same
 * answer and the same message. */
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static gpumem_backend chosen_backend = GPUMEM_BACKEND_DEFAULT;
static bool sim_config_given;
static gpumem_sim_config sim_config;
static bool initialized;
static gpumem_status init_status;
static char init_message[1024];
static int init_cuda_error;
static _Atomic(const gpumem__device_ops *) active_ops;

static gpumem_backend backend_from_environment(void) {
  const char *value = gpumem__option_string(GPUMEM__OPT_DEVICE);
  if (value && strcmp(value, "sim") == 0)
    return GPUMEM_BACKEND_SIM;
  return GPUMEM_BACKEND_CUDA;
}

/* Called with backend_lock held. */
static void initialize_locked(void) {
  gpumem_backend backend =
      chosen_backend == GPUMEM_BACKEND_DEFAULT ? backend_from_environment() : chosen_backend;
  const char *requested = gpumem__option_string(GPUMEM__OPT_DEVICE);
  if (chosen_backend == GPUMEM_BACKEND_DEFAULT && requested && strcmp(requested, "sim") != 0 &&
      strcmp(requested, "cuda") != 0) {
    init_status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                               "GPUMEM_DEVICE=%s: expected 'cuda' or 'sim'", requested);
  } else if (backend == GPUMEM_BACKEND_SIM) {
    init_status = gpumem__sim_device_init(sim_config_given ? &sim_config : NULL);
  } else {
    init_status = gpumem__cuda_device_init();
  }
  chosen_backend = backend;
  initialized = true;
  if (init_status == GPUMEM_OK) {
    atomic_store(&active_ops, backend == GPUMEM_BACKEND_SIM ? &gpumem__sim_device_ops
                                                            : &gpumem__cuda_device_ops);
  } else {
    snprintf(init_message, sizeof init_message, "%s", gpumem_last_error_message());
    init_cuda_error = gpumem_last_cuda_error();
  }
}

const gpumem__device_ops *gpumem__device_get(gpumem_status *status) {
  const gpumem__device_ops *ops = atomic_load_explicit(&active_ops, memory_order_acquire);
  if (GPUMEM_LIKELY(ops != NULL)) {
    if (status)
      *status = GPUMEM_OK;
    return ops;
  }
  pthread_mutex_lock(&backend_lock);
  if (!initialized)
    initialize_locked();
  gpumem_status result = init_status;
  pthread_mutex_unlock(&backend_lock);
  ops = atomic_load_explicit(&active_ops, memory_order_acquire);
  if (result == GPUMEM_OK) {
    const char *verbose = gpumem__option_string(GPUMEM__OPT_VERBOSE);
    static atomic_flag printed = ATOMIC_FLAG_INIT;
    if (verbose && strcmp(verbose, "0") != 0 && !atomic_flag_test_and_set(&printed))
      fprintf(stderr, "%s", gpumem_settings());
  } else {
    gpumem__set_cuda_error(init_cuda_error);
    gpumem__fail(result, "%s", init_message);
  }
  if (status)
    *status = result;
  return ops;
}

gpumem_status gpumem_select_backend(gpumem_backend backend) {
  if (backend != GPUMEM_BACKEND_DEFAULT && backend != GPUMEM_BACKEND_CUDA &&
      backend != GPUMEM_BACKEND_SIM)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_select_backend: unknown backend %d",
                        (int)backend);
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&backend_lock);
  if (initialized) {
    gpumem_backend wanted =
        backend == GPUMEM_BACKEND_DEFAULT ? backend_from_environment() : backend;
    if (wanted != chosen_backend)
      status = gpumem__fail(GPUMEM_ERR_MISUSE,
                            "gpumem_select_backend: the %s backend is already in use; choose "
                            "the backend before the first call that uses a device",
                            chosen_backend == GPUMEM_BACKEND_SIM ? "sim" : "cuda");
  } else {
    chosen_backend = backend;
  }
  pthread_mutex_unlock(&backend_lock);
  return status;
}

gpumem_status gpumem_sim_configure(const gpumem_sim_config *config) {
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&backend_lock);
  if (initialized) {
    status = gpumem__fail(GPUMEM_ERR_MISUSE,
                          "gpumem_sim_configure: the %s backend is already initialized; "
                          "configure the simulated device before the first call that uses it",
                          chosen_backend == GPUMEM_BACKEND_SIM ? "sim" : "cuda");
  } else {
    chosen_backend = GPUMEM_BACKEND_SIM;
    sim_config_given = config != NULL;
    if (config)
      sim_config = *config;
  }
  pthread_mutex_unlock(&backend_lock);
  return status;
}

const char *gpumem_backend_name(void) {
  const gpumem__device_ops *ops = gpumem__device_get(NULL);
  if (ops)
    return ops->name;
  pthread_mutex_lock(&backend_lock);
  gpumem_backend backend = chosen_backend;
  pthread_mutex_unlock(&backend_lock);
  return backend == GPUMEM_BACKEND_SIM ? "sim" : "cuda";
}

gpumem_status gpumem_init(void) {
  gpumem_status status;
  gpumem__device_get(&status);
  return status;
}

gpumem_status gpumem__resolve_device(const gpumem__device_ops *dev, int device, int *resolved) {
  gpumem_status status;
  if (device == GPUMEM_CURRENT_DEVICE) {
    status = dev->get_device(&device);
    if (status != GPUMEM_OK)
      return status;
  }
  int count = 0;
  status = dev->device_count(&count);
  if (status != GPUMEM_OK)
    return status;
  if (device < 0 || device >= count || device >= GPUMEM_MAX_DEVICES)
    return gpumem__fail(GPUMEM_ERR_INVALID_DEVICE,
                        "device %d does not exist: the %s backend has %d device%s (0 to %d)",
                        device, dev->name, count, count == 1 ? "" : "s", count - 1);
  *resolved = device;
  return GPUMEM_OK;
}

gpumem_status gpumem__device_for(const char *caller, int device, const gpumem__device_ops **dev,
                                 int *resolved) {
  gpumem_status status;
  const gpumem__device_ops *ops = gpumem__device_get(&status);
  if (!ops)
    return gpumem__fail_context(status, "%s", caller);
  status = gpumem__resolve_device(ops, device, resolved);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "%s", caller);
  *dev = ops;
  return GPUMEM_OK;
}

gpumem_status gpumem__check_stream(const gpumem__device_ops *dev, int device,
                                   gpumem_stream stream) {
  int stream_device;
  gpumem_status status = dev->stream_device(stream, &stream_device);
  if (status != GPUMEM_OK)
    return status;
  if (stream_device == GPUMEM_CURRENT_DEVICE || stream_device == device)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_STREAM,
                      "stream %p belongs to device %d, but the memory is for device %d",
                      (void *)stream, stream_device, device);
}
