/* no_driver.c: without a CUDA driver or GPU, choosing the cuda backend gives a clear status
 * and a message that names the way out (GPUMEM_DEVICE=sim), and every call that needs the
 * device gives the same answer instead of crashing. Where a GPU is present there is nothing
 * to check: the program skips. */
#include "check.h"

int main(void) {
  gpumem_status status = gpumem_init();
  if (status == GPUMEM_OK) {
    printf("skipped: the CUDA driver and a GPU are here\n");
    return CHECK_SKIP_CODE;
  }
  CHECK(status == GPUMEM_ERR_NO_DRIVER || status == GPUMEM_ERR_NO_DEVICE);
  CHECK_CONTAINS(gpumem_last_error_message(), "GPUMEM_DEVICE=sim");
  printf("gpumem_init: %s: %s\n", gpumem_status_name(status), gpumem_last_error_message());
  gpumem_resource *mr = (gpumem_resource *)0x1;
  CHECK_FAILS_WITH(gpumem_cuda_create(0, &mr), status, "GPUMEM_DEVICE=sim");
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(vmm)", &mr), status, "GPUMEM_DEVICE=sim");
  CHECK_FAILS_WITH(gpumem_get_current_device_resource(&mr), status, "GPUMEM_DEVICE=sim");
  CHECK_PTR_EQ(mr, (gpumem_resource *)0x1);
  int count = -1;
  CHECK_STATUS(gpumem_device_count(&count), status);
  CHECK_EQ(count, -1);
  CHECK(strcmp(gpumem_backend_name(), "cuda") == 0);
  printf("no-driver paths passed\n");
  return 0;
}
