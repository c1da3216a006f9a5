/* fuzz_spec.c: a libFuzzer target for the spec grammar (gpumem_resource_from_spec).
 *
 * Any bytes are a spec (cut at the first NUL). On a small simulated device (256 MiB, so that
 * huge initial sizes fail at once rather than take host memory, and without pageable memory
 * access, so that `system` never asks host malloc for what a spec says), each input must:
 * - fail with a non-empty message and leave the out-pointer untouched, or
 * - build a resource that allocates and frees a small block, and whose description builds
 *   again (after the first is released) into a resource that describes the same way: the
 *   description is a spec of an equal resource. Every resource is released, and device
 *   memory in use is back to none.
 * A name defined with gpumem_spec_define ("mine") stands for a resource the program built.
 * A log's file goes to a directory of the target's own, the working directory while an
 * input runs (libFuzzer's own paths are relative to the one it had), emptied after each
 * input; an input with a '/' could name any file the fuzzer may write, and is not run.
 * Any broken promise aborts, which libFuzzer reports as a crash with the input. */
#include "fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A value no successful call could leave in an out-parameter. */
static gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;

static char work_dir[64];
static int caller_dir = -1; /* the working directory libFuzzer had */

/* Removes the files logs wrote. */
static void empty_work_dir(void) {
  DIR *d = opendir(work_dir);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      unlinkat(dirfd(d), e->d_name, 0);
  if (d)
    closedir(d);
}

static void remove_work_dir(void) {
  empty_work_dir();
  rmdir(work_dir);
}

static void init_once(void) {
  static int done;
  if (done)
    return;
  done = 1;
  unsetenv("GPUMEM_LOG_FILE"); /* a log given no file must not write the caller's */
  snprintf(work_dir, sizeof work_dir, "/tmp/gpumem-fuzz-spec-XXXXXX");
  caller_dir = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  FUZZ_CHECK(mkdtemp(work_dir) != NULL && caller_dir >= 0, "no working directory");
  atexit(remove_work_dir);
  gpumem_sim_config config = {.memory = (uint64_t)256 << 20, .no_pageable_access = 1};
  fuzz_sim_init(&config);
  gpumem_resource *mine;
  FUZZ_OK(gpumem_cuda_create(0, &mine));
  FUZZ_OK(gpumem_spec_define("mine", mine));
  FUZZ_OK(gpumem_resource_release(mine));
}

/* Builds `spec`; on failure checks the promises of a failure and returns NULL. */
static gpumem_resource *build(const char *spec) {
  gpumem_resource *mr = untouched;
  gpumem_status status = gpumem_resource_from_spec(spec, &mr);
  if (status != GPUMEM_OK) {
    FUZZ_CHECK(mr == untouched, "a failed build wrote the out-pointer: \"%s\"", spec);
    FUZZ_CHECK(gpumem_last_error_message()[0] != '\0', "%s with no message: \"%s\"",
               gpumem_status_name(status), spec);
    return NULL;
  }
  FUZZ_CHECK(mr != NULL && mr != untouched, "\"%s\" built no resource", spec);
  return mr;
}

/* One small allocation and its free; failing to allocate (out of memory, an injected fault,
 * an alignment fixed_size cannot give) is allowed, but must leave the pointer alone. */
static void use(gpumem_resource *mr, const char *spec) {
  void *ptr = (void *)untouched;
  gpumem_status status = gpumem_allocate(mr, 1000, NULL, &ptr);
  if (status != GPUMEM_OK) {
    FUZZ_CHECK(ptr == (void *)untouched, "a failed allocation wrote the out-pointer: \"%s\"", spec);
    FUZZ_CHECK(gpumem_last_error_message()[0] != '\0', "allocation failed with no message");
    return;
  }
  FUZZ_CHECK(ptr != NULL && (uintptr_t)ptr % GPUMEM_DEFAULT_ALIGNMENT == 0,
             "\"%s\" gave %p for 1000 bytes", spec, ptr);
  FUZZ_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
}

static void describe(const gpumem_resource *mr, char *buf, size_t size, const char *spec) {
  gpumem_status status = gpumem_resource_describe(mr, buf, size);
  FUZZ_CHECK(status == GPUMEM_OK, "describing \"%s\": %s: %s", spec, gpumem_status_name(status),
             gpumem_last_error_message());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init_once();
  char *spec = malloc(size + 1);
  FUZZ_CHECK(spec != NULL, "no host memory");
  memcpy(spec, data, size);
  spec[size] = '\0';
  if (strchr(spec, '/')) {
    free(spec);
    return 0;
  }
  FUZZ_CHECK(chdir(work_dir) == 0, "cannot enter %s", work_dir);
  gpumem_resource *mr = build(spec);
  if (mr) {
    static char first[16384], second[16384];
    use(mr, spec);
    describe(mr, first, sizeof first, spec);
    FUZZ_OK(gpumem_resource_release(mr));
    gpumem_resource *again = build(first);
    FUZZ_CHECK(again != NULL, "\"%s\" describes as \"%s\", which does not build: %s", spec, first,
               gpumem_last_error_message());
    describe(again, second, sizeof second, first);
    FUZZ_CHECK(strcmp(first, second) == 0, "\"%s\" describes as \"%s\", which describes as \"%s\"",
               spec, first, second);
    FUZZ_OK(gpumem_resource_release(again));
  }
  fuzz_check_device_idle();
  free(spec);
  empty_work_dir();
  FUZZ_CHECK(fchdir(caller_dir) == 0, "cannot go back to the fuzzer's directory");
  return 0;
}
