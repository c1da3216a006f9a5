/* spec.c: tests of gpumem_resource_from_spec on the simulated device.
 *
 * Each base spec builds the right resource, which allocates and frees; parameters reach the
 * options (seen through gpumem_resource_describe, whose output must parse back to an equal
 * resource); whitespace and every size unit are accepted; every kind of bad spec fails
 * with GPUMEM_ERR_INVALID_ARGUMENT, a message naming the problem and a caret under the
 * offending character, and leaves *out alone; a failure while building a nested resource
 * reports it with the spec and leaks nothing. The last part needs a device without
 * pageable memory access, so it runs in a child process that configures the simulation
 * before first use. */
#include "check.h"
#include "gpumem/sim.h"

#include <sys/wait.h>
#include <unistd.h>

/* A value no successful call could leave in an out-parameter. */
static gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;

static const char *describe(const gpumem_resource *mr) {
  static char buf[1024];
  CHECK_OK(gpumem_resource_describe(mr, buf, sizeof buf));
  return buf;
}

/* The spec builds a resource whose description contains `needle`. */
static void check_describe(const char *spec, const char *needle) {
  gpumem_resource *mr = check_build(spec);
  CHECK_CONTAINS(describe(mr), needle);
  CHECK_OK(gpumem_resource_release(mr));
}

/* Two specs build resources with the same description. */
static void check_same(const char *a, const char *b) {
  char first[1024];
  gpumem_resource *mr = check_build(a);
  snprintf(first, sizeof first, "%s", describe(mr));
  CHECK_OK(gpumem_resource_release(mr));
  mr = check_build(b);
  if (strcmp(first, describe(mr)) != 0)
    CHECK_FAIL_("\"%s\" describes as \"%s\" but \"%s\" as \"%s\"", a, first, b, describe(mr));
  CHECK_OK(gpumem_resource_release(mr));
}

static void test_base_specs(void) {
  static const struct {
    const char *spec, *name;
  } rows[] = {
      {"cuda", "cuda"},
      {"managed", "managed"},
      {"async", "async"},
      {"pinned_host", "pinned_host"},
      {"system", "system"},
      {"faulty(cuda)", "faulty"},
      {"retry(cuda)", "retry"},
      {"retry(async, attempts=4)", "retry"},
      {"limit(cuda, max=1GiB)", "limit"},
      {"aligned(cuda)", "aligned"},
      {"prefetch(managed)", "prefetch"},
      {"tracking(cuda)", "tracking"},
      {"tracking(pool(vmm), stacks=true, depth=8)", "tracking"},
      {"stats(cuda)", "stats"},
      {"stats(cuda, flush_bytes=4KiB, flush_count=1)", "stats"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    gpumem_resource *mr = check_build(rows[i].spec);
    CHECK(strcmp(gpumem_resource_name(mr), rows[i].name) == 0);
    void *ptr = NULL;
    CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
    CHECK(ptr != NULL);
    CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
    /* Describe writes a spec that builds an equal resource. */
    char text[1024];
    snprintf(text, sizeof text, "%s", describe(mr));
    check_same(rows[i].spec, text);
    CHECK_OK(gpumem_resource_release(mr));
  }
}

static void test_parameters(void) {
  check_describe("async(release_threshold=1GiB)", "release_threshold=1073741824");
  check_describe("async(initial=2MiB, ipc=none)", "initial=2097152");
  check_describe("async(initial=2MiB, ipc=none)", "ipc=none");
  check_describe("managed(prefetch=true)", "prefetch=true");
  check_describe("managed(read_mostly=true)", "read_mostly=true");
  check_describe("managed(preferred_location=device)", "preferred_location=device");
  check_describe("managed(preferred_location=host)", "preferred_location=host");
  check_describe("managed(accessed_by_device=true)", "accessed_by_device=true");
  check_describe("pinned_host(mapped=true)", "mapped=true");
  check_describe("pinned_host(write_combined=true)", "write_combined=true");
  check_describe("pinned_host(mapped=false, write_combined=false)", "mapped=false");
  check_describe("faulty(cuda, fail_at=3, fail_every=5, status=out_of_memory)",
                 "faulty(cuda, fail_at=3, fail_every=5, status=out_of_memory)");
  check_describe("faulty(managed(prefetch=true), status=cuda)", "managed(prefetch=true");
  check_describe("retry(cuda)", "retry(cuda, attempts=1)");
  check_describe("retry(pool(vmm), attempts=1000)", "attempts=1000");
  check_describe("pool(retry(faulty(cuda), attempts=2))", "pool(retry(faulty(cuda");
  check_describe("pool(vmm, release_holes_over=never)", "release_holes_over=never)");
  check_describe("pool(vmm, release_holes_over=150)", "release_holes_over=150)");
  check_describe("pool(vmm, release_holes_time=100)", "release_holes_time=100)");
  check_describe("pool(vmm, release_holes_over=120, release_holes_time=60)",
                 "release_holes_over=120, release_holes_time=60)");
  check_describe("limit(cuda, max=3GiB)", "limit(cuda, max=3221225472)");
  check_describe("limit(pool(vmm), max=50%)", "max=4294967296)");
  check_describe("aligned(cuda)", "aligned(cuda, alignment=256, threshold=0)");
  check_describe("aligned(cuda, threshold=1MiB, alignment=4KiB)",
                 "aligned(cuda, alignment=4096, threshold=1048576)");
  check_describe("prefetch(pool(managed, initial=1MiB))", "prefetch(pool(managed(prefetch=false)");
  check_describe("tracking(cuda)", "tracking(cuda, stacks=false, depth=32)");
  check_describe("tracking(cuda, depth=256, stacks=true)",
                 "tracking(cuda, stacks=true, depth=256)");
  /* An IPC handle type may be unsupported by the device; where it works it is kept. */
  gpumem_resource *mr = NULL;
  if (gpumem_resource_from_spec("async(ipc=posix_fd)", &mr) == GPUMEM_OK) {
    CHECK_CONTAINS(describe(mr), "ipc=posix_fd");
    CHECK_OK(gpumem_resource_release(mr));
  }

  /* The faulty options act: the second allocation fails with the chosen status. */
  mr = check_build("faulty(cuda, fail_at=2, status=cuda)");
  void *ptr = NULL, *second = untouched;
  CHECK_OK(gpumem_allocate(mr, 256, NULL, &ptr));
  CHECK_STATUS(gpumem_allocate(mr, 256, NULL, &second), GPUMEM_ERR_CUDA);
  CHECK_PTR_EQ(second, untouched);
  CHECK_OK(gpumem_deallocate(mr, ptr, 256, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* Every description round-trips, nested ones included. */
  const char *specs[] = {
      "async(release_threshold=1GiB, initial=1MiB)",
      ("managed(prefetch=true, read_mostly=true, preferred_location=host, "
       "accessed_by_device=true)"), /* one spec: the parentheses say so to clang */
      "pinned_host(mapped=true, write_combined=true)",
      "faulty(faulty(async, fail_every=7), fail_at=3, status=out_of_memory)",
      "prefetch(aligned(limit(pool(managed), max=2GiB), alignment=64KiB, threshold=1MiB))",
      "pool(vmm, release_holes_over=never)",
      "pool(vmm, release_holes_over=200)",
      "pool(vmm, release_holes_time=100)",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    char text[1024];
    mr = check_build(specs[i]);
    snprintf(text, sizeof text, "%s", describe(mr));
    CHECK_OK(gpumem_resource_release(mr));
    check_same(specs[i], text);
  }
}

static void test_whitespace(void) {
  const char *compact = "faulty(cuda,fail_at=3,status=cuda)";
  /* A pool's default share of time for releases is left out of its description. */
  check_same("pool(vmm)", "pool(vmm, release_holes_time=25)");
  check_same(compact, "  faulty ( cuda , fail_at = 3 , status = cuda )  ");
  check_same(compact, "faulty(\n\tcuda,\n\tfail_at=3,\n\tstatus=cuda\n)\n");
  check_same(compact, "faulty(status=cuda, fail_at=3, cuda)");
  check_same("cuda", " cuda ");
}

/* release_threshold=<text> builds an async resource whose threshold is `bytes`. */
static void check_size(const char *text, uint64_t bytes) {
  char spec[128], needle[64];
  snprintf(spec, sizeof spec, "async(release_threshold=%s)", text);
  snprintf(needle, sizeof needle, "release_threshold=%" PRIu64 ",", bytes);
  check_describe(spec, needle);
}

static void test_sizes(void) {
  check_size("4096", 4096);
  check_size("100B", 100);
  check_size("3K", 3ull << 10);
  check_size("3M", 3ull << 20);
  check_size("3G", 3ull << 30);
  check_size("3T", 3ull << 40);
  check_size("3KiB", 3ull << 10);
  check_size("3MiB", 3ull << 20);
  check_size("3GiB", 3ull << 30);
  check_size("3TiB", 3ull << 40);
  check_size("3KB", 3000ull);
  check_size("3MB", 3000000ull);
  check_size("3GB", 3000000000ull);
  check_size("3TB", 3000000000000ull);
  check_size("1.5GiB", 3ull << 29);
  size_t free_bytes = 0, total = 0;
  CHECK_OK(gpumem_device_memory_info(0, &free_bytes, &total));
  check_size("50%", total / 2);
  check_size("25%", total / 4);
  check_size("100%", total);
}

static void test_devices(void) {
  gpumem_resource *mr = check_build("cuda");
  CHECK_EQ(gpumem_resource_device(mr), 0);
  CHECK_OK(gpumem_resource_release(mr));
  mr = NULL;
  CHECK_OK(gpumem_resource_from_spec_for_device("faulty(managed)", 1, &mr));
  CHECK_EQ(gpumem_resource_device(mr), 1);
  gpumem_resource *up = NULL;
  CHECK_OK(gpumem_resource_upstream(mr, &up));
  CHECK_EQ(gpumem_resource_device(up), 1);
  CHECK_OK(gpumem_resource_release(mr));
  mr = untouched;
  CHECK_STATUS(gpumem_resource_from_spec_for_device("cuda", 99, &mr), GPUMEM_ERR_INVALID_DEVICE);
  CHECK_PTR_EQ(mr, untouched);
}

/* The message's last two lines are the quoted spec and a caret at `column`: checks the
 * exact text, for a spec short and plain enough to be quoted as it is. */
static void check_error(const char *spec, const char *needle, int column) {
  gpumem_resource *mr = untouched;
  gpumem_status status = gpumem_resource_from_spec(spec, &mr);
  if (status != GPUMEM_ERR_INVALID_ARGUMENT)
    CHECK_FAIL_("\"%s\" returned %s", spec, gpumem_status_name(status));
  CHECK_PTR_EQ(mr, untouched);
  const char *message = gpumem_last_error_message();
  CHECK(strncmp(message, "invalid resource spec: ", 23) == 0);
  CHECK_CONTAINS(message, needle);
  char tail[512];
  snprintf(tail, sizeof tail, "\n  %s\n  %*s^", spec, column, "");
  size_t len = strlen(message), tail_len = strlen(tail);
  if (len < tail_len || strcmp(message + len - tail_len, tail) != 0)
    CHECK_FAIL_("message for \"%s\" ends with a caret at column %d", spec, column);
  /* What is wrong fits on the first line. */
  CHECK(strchr(message, '\n') == message + len - tail_len);
}

static void test_errors(void) {
  check_error("", "empty spec", 0);
  check_error("   ", "empty spec", 3);
  check_error("pooll(cuda)",
              "unknown resource 'pooll' (known: cuda, managed, async, pinned_host, system, "
              "faulty, retry, pool, arena, binning, fixed_size, vmm, limit, aligned, prefetch, "
              "tracking, stats, log)",
              0);
  check_error("CUDA", "unknown resource 'CUDA'", 0);
  check_error("3", "expected a resource name", 0);
  check_error("faulty(cuda, fail_al=3)",
              "unknown parameter 'fail_al' of 'faulty' (known: fail_at, fail_every, status)", 13);
  check_error("cuda(prefetch=true)", "unknown parameter 'prefetch' of 'cuda'", 5);
  check_error("async(initial=lots)", "bad value for 'initial' of 'async' (expected a size", 14);
  check_error("async(initial=150%)", "expected a size such as 1GiB", 14);
  check_error("async(initial=1GiBs)", "expected a size", 14);
  check_error("async(initial=99999999999999999999)", "expected a size", 14);
  check_error("managed(prefetch=yes)",
              "bad value for 'prefetch' of 'managed' (expected true or false)", 17);
  check_error("managed(preferred_location=gpu)", "expected one of: device, host", 27);
  check_error("async(ipc=tcp)", "expected one of: none, posix_fd, fabric", 10);
  check_error("faulty(cuda, status=oom)", "expected one of: injected, out_of_memory, cuda", 20);
  check_error("faulty(cuda, fail_at=3K)", "expected a count such as 3", 21);
  check_error("faulty(cuda, fail_at=-1)", "expected a count", 21);
  check_error("pool(vmm, release_holes_over=sometimes)",
              "expected a count from 0 to 10000, or never", 29);
  check_error("pool(vmm, release_holes_time=0)", "expected a count from 1 to 100", 29);
  check_error("pool(vmm, release_holes_time=101)", "expected a count from 1 to 100", 29);
  check_error("faulty(cuda, fail_at=)", "bad value for 'fail_at'", 21);
  check_error("faulty(cuda, fail_at=99999999999999999999)", "expected a count", 21);
  check_error("faulty", "missing upstream for 'faulty'", 0);
  check_error("faulty(fail_at=3)", "missing upstream for 'faulty'", 0);
  check_error("faulty(faulty(fail_every=2))", "missing upstream for 'faulty'", 7);
  check_error("cuda(cuda)", "'cuda' takes no upstream", 5);
  check_error("managed(prefetch=true, system)", "'managed' takes no upstream", 23);
  check_error("faulty(cuda, system)", "two upstreams for 'faulty'", 13);
  check_error("faulty(cuda, fail_at=1, fail_at=2)",
              "parameter 'fail_at' of 'faulty' is given twice", 24);
  check_error("faulty(cuda", "unbalanced parentheses", 11);
  check_error("faulty(cuda, fail_at=3", "unbalanced parentheses", 22);
  check_error("faulty(faulty(cuda)", "unbalanced parentheses", 19);
  check_error("faulty(cuda,", "unbalanced parentheses", 12);
  check_error("cuda)", "unbalanced parentheses", 4);
  check_error("cuda x", "trailing text", 5);
  check_error("cuda, managed", "trailing text", 4);
  check_error("faulty(cuda fail_at=3)", "expected ',' or ')'", 12);
  check_error("faulty(cuda, fail_at 3)", "expected '=' after parameter 'fail_at'", 21);
  check_error("faulty(cuda,)", "expected a resource or key=value", 12);
  check_error("faulty(cuda, =3)", "expected a resource or key=value", 13);
  check_error("cuda()", "empty parentheses", 5);
  check_error("retry", "missing upstream for 'retry'", 0);
  check_error("retry(attempts=2)", "missing upstream for 'retry'", 0);
  check_error("retry(cuda, tries=2)", "unknown parameter 'tries' of 'retry' (known: attempts)", 12);
  check_error("retry(cuda, attempts=x)", "bad value for 'attempts' of 'retry' (expected a count",
              21);
  check_error("retry(cuda, attempts=-1)", "expected a count", 21);
  check_error("retry(cuda, attempts=2GiB)", "expected a count", 21);
  check_error("retry(cuda, attempts=1, attempts=2)", "given twice", 24);
  /* Counts that parse but make no sense fail when the adaptor is built, creating nothing. */
  static const char *const bad_attempts[] = {"retry(cuda, attempts=0)",
                                             "retry(cuda, attempts=1001)",
                                             "pool(retry(vmm, attempts=99999999999))"};
  for (size_t i = 0; i < sizeof bad_attempts / sizeof bad_attempts[0]; i++) {
    gpumem_resource *bad = untouched;
    CHECK_FAILS_WITH(gpumem_resource_from_spec(bad_attempts[i], &bad), GPUMEM_ERR_INVALID_ARGUMENT,
                     "attempts must be from 1 to 1000");
    CHECK_CONTAINS(gpumem_last_error_message(), "building 'retry'");
    CHECK_PTR_EQ(bad, untouched);
  }
  check_error("limit(cuda, max=lots)", "bad value for 'max' of 'limit' (expected a size", 16);
  check_error("limit(cuda, limit=1GiB)", "unknown parameter 'limit' of 'limit' (known: max)", 12);
  check_error("limit(max=1GiB)", "missing upstream for 'limit'", 0);
  check_error("aligned(cuda, alignment=4K0)", "bad value for 'alignment' of 'aligned'", 24);
  check_error("aligned(cuda, threshold=-1)", "bad value for 'threshold' of 'aligned'", 24);
  check_error("aligned(cuda, align=4096)",
              "unknown parameter 'align' of 'aligned' (known: alignment, threshold)", 14);
  check_error("prefetch(cuda, device=1)",
              "unknown parameter 'device' of 'prefetch' (it takes none)", 15);
  check_error("prefetch", "missing upstream for 'prefetch'", 0);
  check_error("tracking(cuda, stacks=yes)",
              "bad value for 'stacks' of 'tracking' (expected true or false)", 22);
  check_error("tracking(cuda, depth=0)",
              "bad value for 'depth' of 'tracking' (expected a count from 1 to 256)", 21);
  check_error("tracking(cuda, depth=257)", "bad value for 'depth' of 'tracking'", 21);
  check_error("tracking(cuda, stack=true)",
              "unknown parameter 'stack' of 'tracking' (known: stacks, depth)", 15);
  check_error("tracking", "missing upstream for 'tracking'", 0);
  check_error("stats(cuda, flush_count=0)",
              "bad value for 'flush_count' of 'stats' (expected a count from 1 to", 24);
  check_error("stats(cuda, peak=1)",
              "unknown parameter 'peak' of 'stats' (known: flush_bytes, flush_count)", 12);
  gpumem_resource *zero_flush = untouched;
  CHECK_FAILS_WITH(gpumem_resource_from_spec("stats(cuda, flush_bytes=0)", &zero_flush),
                   GPUMEM_ERR_INVALID_ARGUMENT, "flush_bytes must be at least 1");
  CHECK_PTR_EQ(zero_flush, untouched);

  /* Sixteen resources deep builds; seventeen is refused at the seventeenth. */
  char spec[512] = "";
  for (int i = 0; i < 15; i++)
    strcat(spec, "faulty(");
  strcat(spec, "cuda");
  for (int i = 0; i < 15; i++)
    strcat(spec, ")");
  CHECK_OK(gpumem_resource_release(check_build(spec)));
  spec[0] = '\0';
  for (int i = 0; i < 16; i++)
    strcat(spec, "faulty(");
  strcat(spec, "cuda");
  for (int i = 0; i < 16; i++)
    strcat(spec, ")");
  check_error(spec, "nesting deeper than 16", 16 * 7);

  gpumem_resource *mr = untouched;
  CHECK_FAILS_WITH(gpumem_resource_from_spec(NULL, &mr), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_PTR_EQ(mr, untouched);
  CHECK_STATUS(gpumem_resource_from_spec("cuda", NULL), GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(gpumem_resource_from_spec_for_device("cuda", 0, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
}

/* Tabs and newlines are quoted as spaces, so the caret stays under its character. */
/* Values the grammar reads but the adaptor refuses: the build's message names the option. */
static void test_adaptor_values(void) {
  static const struct {
    const char *spec, *needle;
  } rows[] = {
      {"limit(cuda)", "'max' in a spec) is missing or zero"},
      {"limit(cuda, max=0)", "is missing or zero"},
      {"aligned(cuda, alignment=3000)", "the alignment 3000 is not a power of two"},
      {"aligned(cuda, alignment=0)", "the alignment 0 is not a power of two"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    gpumem_resource *mr = untouched;
    CHECK_FAILS_WITH(gpumem_resource_from_spec(rows[i].spec, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                     rows[i].needle);
    CHECK_CONTAINS(gpumem_last_error_message(), rows[i].spec);
    CHECK_PTR_EQ(mr, untouched);
  }
}

static void test_error_quoting(void) {
  gpumem_resource *mr = untouched;
  CHECK_STATUS(gpumem_resource_from_spec("faulty(\tcuda,\n bogus=1)", &mr),
               GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(gpumem_last_error_message(), "\n  faulty( cuda,  bogus=1)\n                 ^");

  /* A long spec is quoted around the error, cut with "...", the caret still under it. */
  char spec[1024] = "faulty(cuda";
  for (int i = 0; i < 30; i++)
    strcat(spec, "          ");
  strcat(spec, ", bogus=1");
  for (int i = 0; i < 30; i++)
    strcat(spec, "          ");
  strcat(spec, ")");
  CHECK_STATUS(gpumem_resource_from_spec(spec, &mr), GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK_PTR_EQ(mr, untouched);
  const char *message = gpumem_last_error_message();
  const char *quote = strchr(message, '\n');
  CHECK(quote != NULL);
  const char *caret_line = strchr(quote + 1, '\n');
  CHECK(caret_line != NULL);
  size_t column = strlen(caret_line + 1) - 1; /* the caret is the line's last character */
  CHECK(caret_line[1 + column] == '^');
  CHECK(column < (size_t)(caret_line - quote));
  CHECK(strncmp(quote + 1 + column, "bogus", 5) == 0);
  CHECK(strncmp(quote + 1, "  ...", 5) == 0);
  CHECK(strncmp(caret_line - 3, "...", 3) == 0);
  CHECK(strlen(message) < 600);
}

/* Runs in a child whose simulated devices cannot access pageable memory, so that "system"
 * fails to build wherever it stands in a spec. */
static void test_nested_failure(void) {
  gpumem_sim_config config = {.no_pageable_access = 1};
  CHECK_OK(gpumem_sim_configure(&config));
  CHECK_OK(gpumem_init());
  uint64_t before = 0, after = 0;
  CHECK_OK(gpumem_sim_device_used(0, &before));

  gpumem_resource *mr = untouched;
  CHECK_STATUS(gpumem_resource_from_spec("system", &mr), GPUMEM_ERR_UNSUPPORTED);
  CHECK_CONTAINS(gpumem_last_error_message(), "resource spec 'system': building 'system': ");
  CHECK_CONTAINS(gpumem_last_error_message(), "pageable");
  CHECK_STATUS(gpumem_resource_from_spec("faulty(system, fail_at=2)", &mr), GPUMEM_ERR_UNSUPPORTED);
  CHECK_CONTAINS(gpumem_last_error_message(),
                 "resource spec 'faulty(system, fail_at=2)': building 'system': ");
  CHECK_STATUS(gpumem_resource_from_spec("faulty(faulty(system))", &mr), GPUMEM_ERR_UNSUPPORTED);
  CHECK_CONTAINS(gpumem_last_error_message(), "pageable");
  CHECK_PTR_EQ(mr, untouched);

  /* A device failure inside a nested build: the driver pool cannot be created. */
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_POOL_CREATE, 1));
  CHECK_STATUS(gpumem_resource_from_spec("faulty(async(initial=1MiB))", &mr), GPUMEM_ERR_CUDA);
  CHECK_CONTAINS(gpumem_last_error_message(),
                 "resource spec 'faulty(async(initial=1MiB))': building 'async'");
  CHECK_PTR_EQ(mr, untouched);
  CHECK_OK(gpumem_sim_device_used(0, &after));
  CHECK_U64_EQ(after, before);

  /* The same spec builds once the device lets it, and gives all back on release. */
  mr = check_build("faulty(async(initial=1MiB))");
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_sim_device_used(0, &after));
  CHECK_U64_EQ(after, before);
}

static void run_nested_failure_in_child(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    test_nested_failure();
    exit(0);
  }
  int wstatus = 0;
  CHECK(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFEXITED(wstatus));
  CHECK_EQ(WEXITSTATUS(wstatus), 0);
}

int main(void) {
  /* Before anything initializes the backend: the child configures its own simulation. */
  run_nested_failure_in_child();
  check_init_backend();
  test_base_specs();
  test_parameters();
  test_whitespace();
  test_sizes();
  test_devices();
  test_errors();
  test_adaptor_values();
  test_error_quoting();
  printf("spec: all checks passed\n");
  return 0;
}
