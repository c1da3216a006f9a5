/* user_resource.c: "user_cuda", a resource written the way a program writes its own
 * (gpumem_user_resource_create, public API only), named for specs so that gpumem-bench can
 * measure what composing over a user-written resource costs: "pool(user_cuda)" beside
 * "pool(cuda)". It forwards every call to a gpumem cuda resource of the device. */
#include "bench/bench.h"

#include <string.h>

static gpumem_status forward_allocate(void *state, size_t bytes, size_t alignment,
                                      gpumem_stream stream, void **ptr) {
  return gpumem_allocate_aligned(state, bytes, alignment, stream, ptr);
}

static gpumem_status forward_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                        gpumem_stream stream) {
  return gpumem_deallocate_aligned(state, ptr, bytes, alignment, stream);
}

static gpumem_status forward_query(void *state, gpumem_query what, uint64_t *out) {
  return gpumem_resource_query(state, what, out);
}

static void forward_destroy(void *state) {
  gpumem_resource_release(state);
}

gpumem_status bench_define_user_resource(const char *spec, int device) {
  if (!strstr(spec, "user_cuda"))
    return GPUMEM_OK;
  gpumem_resource *cuda, *user;
  gpumem_status status = gpumem_cuda_create(device, &cuda);
  if (status != GPUMEM_OK)
    return status;
  gpumem_user_resource_ops ops = {
      .size = sizeof ops,
      .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
      .allocate = forward_allocate,
      .deallocate = forward_deallocate,
      .query = forward_query,
      .destroy = forward_destroy,
      .memory = GPUMEM_MEMORY_DEVICE,
      .name = "user_cuda",
  };
  status = gpumem_user_resource_create(device, &ops, cuda, &user);
  if (status != GPUMEM_OK) {
    gpumem_resource_release(cuda);
    return status;
  }
  status = gpumem_spec_define("user_cuda", user); /* replaces the last one, of any device */
  gpumem_resource_release(user);
  return status;
}
