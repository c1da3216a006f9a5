/* version.c: the library's version is one figure everywhere. gpumem_version() and
 * gpumem_version_number() at run time, the header's GPUMEM_VERSION_* macros, and the version
 * CMake read from the header for the package and the shared library's SONAME
 * (GPUMEM_TEST_CMAKE_VERSION, defined by tests/CMakeLists.txt) must agree. */
#include "check.h"

int main(void) {
  char header[64];
  snprintf(header, sizeof header, "%d.%d.%d", GPUMEM_VERSION_MAJOR, GPUMEM_VERSION_MINOR,
           GPUMEM_VERSION_PATCH);
  const char *runtime = gpumem_version();
  CHECK(runtime != NULL);
  CHECK(strcmp(runtime, header) == 0);
  CHECK(strcmp(runtime, GPUMEM_TEST_CMAKE_VERSION) == 0);
  CHECK_EQ(gpumem_version_number(), GPUMEM_VERSION_NUMBER);
  CHECK_EQ(GPUMEM_VERSION_NUMBER,
           GPUMEM_VERSION_MAJOR * 10000 + GPUMEM_VERSION_MINOR * 100 + GPUMEM_VERSION_PATCH);
  /* The same pointer each time: the string is static. */
  CHECK_PTR_EQ(gpumem_version(), runtime);
  printf("version %s (header %s, CMake %s, number %d) passed\n", runtime, header,
         GPUMEM_TEST_CMAKE_VERSION, gpumem_version_number());
  return 0;
}
