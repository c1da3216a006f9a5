/* version.c: the version of the library that runs, which a program loading a shared
 * libgpumem may compare with the header it was compiled with. The figures come from
 * gpumem.h, the one source of the version. */
#include "gpumem.h"

#define GPUMEM_STRINGIFY_(x) #x
#define GPUMEM_STRINGIFY(x) GPUMEM_STRINGIFY_(x)

static const char version[] = GPUMEM_STRINGIFY(GPUMEM_VERSION_MAJOR) "." GPUMEM_STRINGIFY(
    GPUMEM_VERSION_MINOR) "." GPUMEM_STRINGIFY(GPUMEM_VERSION_PATCH);

const char *gpumem_version(void) {
  return version;
}

int gpumem_version_number(void) {
  return GPUMEM_VERSION_NUMBER;
}
