/* main.c: a downstream program, as a user of gpumem writes one. It includes only
 * <gpumem.h> and is built outside gpumem's tree, against an installed copy, three ways
 * (find_package with the shared and the static library, and pkg-config), by run.sh. It
 * proves the installed header and libraries are enough to create each base resource from a
 * spec, allocate and free through it, and move data through a device buffer, on whichever
 * backend GPUMEM_DEVICE selects.
 *
 * Exit status: 0 when every spec works, 77 when there is no GPU (GPUMEM_DEVICE=cuda on a
 * machine without one), 1 with a message on any failure. */
#include <gpumem.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_CODE 77
#define FIRST_SIZE ((size_t)4 << 10)  /* the buffer made from host data */
#define GROWN_SIZE ((size_t)40 << 10) /* resized to this: past any capacity it had */
#define RAW_SIZE ((size_t)1 << 20)    /* the plain allocate/free */

static const char *const specs[] = {
    "cuda",        "managed", "async", "async(release_threshold=1GiB)", "managed(prefetch=true)",
    "pinned_host", "system",
};

/* Prints the failed call with gpumem's message and ends the program: once the backend is up,
 * anything a consumer cannot do is a failure, never a skip. */
static void fail(const char *spec, const char *what, gpumem_status status) {
  fprintf(stderr, "consumer: %s: %s failed: %s (%s)\n  %s\n", spec, what,
          gpumem_status_name(status), gpumem_status_string(status), gpumem_last_error_message());
  exit(1);
}

#define TRY(spec, call)                                                                            \
  do {                                                                                             \
    gpumem_status try_s_ = (call);                                                                 \
    if (try_s_ != GPUMEM_OK)                                                                       \
      fail(spec, #call, try_s_);                                                                   \
  } while (0)

/* A pattern that differs at every byte of a page and between the two halves written, so a
 * copy that drops, shifts or mixes bytes shows. */
static unsigned char pattern(size_t i, unsigned seed) {
  return (unsigned char)((i * 131u + (i >> 8) * 7u + seed) & 0xffu);
}

static void check_bytes(const char *spec, const char *what, const unsigned char *got, size_t offset,
                        size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    unsigned char want = pattern(offset + i, seed);
    if (got[i] != want) {
      fprintf(stderr, "consumer: %s: %s: byte %zu is 0x%02x, expected 0x%02x\n", spec, what,
              offset + i, got[i], want);
      exit(1);
    }
  }
}

/* Everything one resource must do; returns 0 when it ran, 1 when the spec is unsupported
 * here (skipped). */
static int exercise(const char *spec, gpumem_stream stream) {
  gpumem_resource *mr = NULL;
  gpumem_status status = gpumem_resource_from_spec(spec, &mr);
  if (status == GPUMEM_ERR_UNSUPPORTED) {
    /* system memory needs pageable memory access (HMM or ATS); most GPUs lack it. */
    printf("%-30s skipped: %s\n", spec, gpumem_last_error_message());
    return 1;
  }
  if (status != GPUMEM_OK)
    fail(spec, "gpumem_resource_from_spec", status);

  /* A plain allocation, stream-ordered, freed on the same stream. */
  void *raw = NULL;
  TRY(spec, gpumem_allocate(mr, RAW_SIZE, stream, &raw));
  if (raw == NULL || (uintptr_t)raw % GPUMEM_DEFAULT_ALIGNMENT != 0) {
    fprintf(stderr, "consumer: %s: allocation of %zu bytes gave %p (not 256-aligned)\n", spec,
            RAW_SIZE, raw);
    exit(1);
  }
  TRY(spec, gpumem_deallocate(mr, raw, RAW_SIZE, stream));

  /* A device buffer made from host data, grown past its capacity (a reallocation and a
   * device-to-device copy), then read back: the copy in, the move and the copy out must
   * all have kept the bytes. */
  unsigned char *host = malloc(GROWN_SIZE);
  if (!host) {
    fprintf(stderr, "consumer: out of host memory\n");
    exit(1);
  }
  for (size_t i = 0; i < FIRST_SIZE; i++)
    host[i] = pattern(i, 1);
  gpumem_buffer *buf = NULL;
  TRY(spec, gpumem_buffer_create_from_host(host, FIRST_SIZE, stream, mr, &buf));
  TRY(spec, gpumem_buffer_resize(buf, GROWN_SIZE, stream));
  if (gpumem_buffer_size(buf) != GROWN_SIZE || gpumem_buffer_capacity(buf) < GROWN_SIZE) {
    fprintf(stderr, "consumer: %s: resized buffer has size %zu, capacity %zu; expected %zu\n", spec,
            gpumem_buffer_size(buf), gpumem_buffer_capacity(buf), GROWN_SIZE);
    exit(1);
  }
  /* The grown part is uninitialized: fill it, so the whole buffer is compared below. */
  for (size_t i = FIRST_SIZE; i < GROWN_SIZE; i++)
    host[i] = pattern(i, 2);
  TRY(spec,
      gpumem_buffer_copy_from_host(buf, FIRST_SIZE, host + FIRST_SIZE, GROWN_SIZE - FIRST_SIZE));
  memset(host, 0, GROWN_SIZE);
  TRY(spec, gpumem_buffer_copy_to_host(buf, host, GROWN_SIZE));
  check_bytes(spec, "first part after resize", host, 0, FIRST_SIZE, 1);
  check_bytes(spec, "grown part", host + FIRST_SIZE, FIRST_SIZE, GROWN_SIZE - FIRST_SIZE, 2);
  gpumem_buffer_destroy(buf);
  free(host);

  /* The buffer's free is stream-ordered; the release only succeeds once nothing is live. */
  TRY(spec, gpumem_stream_synchronize(stream));
  TRY(spec, gpumem_resource_release(mr));
  printf("%-30s ok: allocate/free %zu B, buffer %zu B -> %zu B preserved\n", spec, RAW_SIZE,
         FIRST_SIZE, GROWN_SIZE);
  return 0;
}

/* The installed library is the installed header's version, and, built through
 * find_package, the CMake package's (CONSUMER_PACKAGE_VERSION, from CMakeLists.txt). */
static void check_version(void) {
  char header[64];
  snprintf(header, sizeof header, "%d.%d.%d", GPUMEM_VERSION_MAJOR, GPUMEM_VERSION_MINOR,
           GPUMEM_VERSION_PATCH);
  const char *expected[] = {
      header,
#ifdef CONSUMER_PACKAGE_VERSION
      CONSUMER_PACKAGE_VERSION,
#endif
  };
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
    if (strcmp(gpumem_version(), expected[i]) != 0) {
      fprintf(stderr, "consumer: the library is version %s, expected %s\n", gpumem_version(),
              expected[i]);
      exit(1);
    }
  if (gpumem_version_number() != GPUMEM_VERSION_NUMBER) {
    fprintf(stderr, "consumer: gpumem_version_number() is %d, the header's %d\n",
            gpumem_version_number(), GPUMEM_VERSION_NUMBER);
    exit(1);
  }
}

int main(void) {
  check_version();
  gpumem_status status = gpumem_init();
  if (status == GPUMEM_ERR_NO_DRIVER || status == GPUMEM_ERR_NO_DEVICE) {
    printf("skipped (no GPU): %s\n", gpumem_last_error_message());
    return SKIP_CODE;
  }
  if (status != GPUMEM_OK)
    fail("-", "gpumem_init", status);
  printf("backend: %s (gpumem %s, as its header)\n", gpumem_backend_name(), gpumem_version());

  gpumem_stream stream = NULL;
  TRY("-", gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &stream));
  int skipped = 0;
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    skipped += exercise(specs[i], stream);
  TRY("-", gpumem_stream_destroy(stream));
  printf("consumer: %zu specs passed, %d skipped\n", sizeof specs / sizeof specs[0] - skipped,
         skipped);
  return 0;
}
