/* report.c: the out-of-memory report, its verdict and the JSON dump, on a small simulated
 * device (64 MiB), so that running the device dry is quick.
 *
 * - Each verdict from a failure that causes it: fragmentation (with the device full, and
 *   with a limit below the pool), limit_reached (a limit adaptor, a limit above a fragmented
 *   pool, a pool's maximum), device_full (with what the process holds of the device),
 *   host_failure (every host allocation of an allocation failed in turn), too_large,
 *   injected, and through user resources (their own word, and a gpumem resource they call).
 * - The same report on demand, judged from the figures, and "none" where nothing stops it.
 * - Trees: a binning resource's bins and an arena's pools are in the report and the JSON, and
 *   the upstream they share with their owner is written once.
 * - Buffers: too small, or none to ask the size, fails with the size needed and leaves the
 *   buffer untouched; bad arguments fail clearly.
 * - JSON: every document parses (a small checker here; the Python suite parses it with
 *   Python's json), with every figure key on every node and strings escaped.
 * - The host out of memory while the report is written: the verdict alone, from the cause.
 * - Threads allocating (and running out) while another reads reports and JSON.
 *
 * The program is linked with malloc, calloc and realloc wrapped (-Wl,--wrap, with the static
 * library), so that a test decides which host allocation fails. */
#include "check.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *ptr, size_t size);

/* Host allocations since the count was reset; the one to fail (0: none); from which on
 * every one fails (0: none). Threads count too; only the main thread arms a failure, while
 * no other thread runs. */
static atomic_size_t host_allocations, host_allocation_to_fail, host_allocations_fail_from;

static bool host_allocation_fails(void) {
  size_t n = atomic_fetch_add(&host_allocations, 1) + 1;
  size_t from = atomic_load(&host_allocations_fail_from);
  return n == atomic_load(&host_allocation_to_fail) || (from != 0 && n >= from);
}

void *__wrap_malloc(size_t size) {
  return host_allocation_fails() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t count, size_t size) {
  return host_allocation_fails() ? NULL : __real_calloc(count, size);
}

void *__wrap_realloc(void *ptr, size_t size) {
  return host_allocation_fails() ? NULL : __real_realloc(ptr, size);
}

/* ---------------------------------------------------------------------------------------
 * A JSON checker: true when `text` is one JSON value and nothing else, strings in UTF-8
 * ------------------------------------------------------------------------------------- */

typedef struct json_cursor {
  const char *at;
  int depth;
} json_cursor;

static bool json_value(json_cursor *c);

static void json_space(json_cursor *c) {
  while (*c->at == ' ' || *c->at == '\n' || *c->at == '\t' || *c->at == '\r')
    c->at++;
}

static bool json_word(json_cursor *c, const char *word) {
  size_t length = strlen(word);
  if (strncmp(c->at, word, length) != 0)
    return false;
  c->at += length;
  return true;
}

static bool json_string(json_cursor *c) {
  if (*c->at++ != '"')
    return false;
  for (;;) {
    unsigned char ch = (unsigned char)*c->at++;
    if (ch == '"')
      return true;
    if (ch < 0x20)
      return false; /* the end of the text, or a control character left raw */
    if (ch == '\\') {
      char e = *c->at++;
      if (e == 'u') {
        for (int i = 0; i < 4; i++)
          if (!strchr("0123456789abcdefABCDEF", *c->at) || !*c->at++)
            return false;
      } else if (!strchr("\"\\/bfnrt", e) || !e) {
        return false;
      }
    } else if (ch >= 0x80) {
      int more = ch >= 0xF0 && ch <= 0xF4 ? 3 : ch >= 0xE0 ? 2 : ch >= 0xC2 && ch < 0xE0 ? 1 : -1;
      if (more < 0)
        return false;
      for (int i = 0; i < more; i++)
        if (((unsigned char)*c->at++ & 0xC0) != 0x80)
          return false;
    }
  }
}

static bool json_number(json_cursor *c) {
  const char *start = c->at;
  if (*c->at == '-')
    c->at++;
  if (*c->at == '0')
    c->at++;
  else if (*c->at >= '1' && *c->at <= '9')
    while (*c->at >= '0' && *c->at <= '9')
      c->at++;
  else
    return false;
  if (*c->at == '.') {
    c->at++;
    if (!(*c->at >= '0' && *c->at <= '9'))
      return false;
    while (*c->at >= '0' && *c->at <= '9')
      c->at++;
  }
  return c->at > start;
}

/* `open` was read; items until `close`, each read by `item`. */
static bool json_items(json_cursor *c, char close, bool members) {
  json_space(c);
  if (*c->at == close) {
    c->at++;
    return true;
  }
  for (;;) {
    json_space(c);
    if (members) {
      if (!json_string(c))
        return false;
      json_space(c);
      if (*c->at++ != ':')
        return false;
    }
    if (!json_value(c))
      return false;
    json_space(c);
    char next = *c->at++;
    if (next == close)
      return true;
    if (next != ',')
      return false;
  }
}

static bool json_value(json_cursor *c) {
  if (++c->depth > 200)
    return false;
  json_space(c);
  bool ok;
  char first = *c->at;
  if (first == '{' || first == '[') {
    c->at++;
    ok = json_items(c, first == '{' ? '}' : ']', first == '{');
  } else if (first == '"') {
    ok = json_string(c);
  } else if (first == 't' || first == 'f' || first == 'n') {
    ok = json_word(c, "true") || json_word(c, "false") || json_word(c, "null");
  } else {
    ok = json_number(c);
  }
  c->depth--;
  return ok;
}

static bool json_valid(const char *text) {
  json_cursor c = {text, 0};
  if (!json_value(&c))
    return false;
  json_space(&c);
  return *c.at == '\0';
}

static void check_json_checker(void) {
  static const char *const good[] = {"{}", "[]", "{\"a\":[1,-2.5,null,true,false,\"x\\n\\u00e9\"]}",
                                     "\"caf\xc3\xa9\"", "0"};
  static const char *const bad[] = {"{",        "{\"a\" 1}", "[1,]",      "\"a",      "01",
                                    "{} x",     "\"\x01\"",  "\"\\x\"",   "\"\xff\"", "tru",
                                    "{\"a\":}", "[1 2]",     "\"\\u12\"", "\"\xc3(\""};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    CHECK(json_valid(good[i]));
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (json_valid(bad[i]))
      CHECK_FAIL_("the JSON checker takes %s", bad[i]);
}

/* ---------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------- */

/* Occurrences of `needle` in `text`. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle))
    n++;
  return n;
}

/* The message (or report) ends with one verdict line, "verdict: WORD: ...", and contains
 * no other; `needle` is in it. */
static void check_verdict(const char *text, const char *word, const char *needle) {
  const char *line = strrchr(text, '\n');
  CHECK(line != NULL);
  line++;
  if (*line == '\0') { /* a report ends with a newline: its last line is before it */
    const char *end = line - 1;
    for (line = end; line > text && line[-1] != '\n'; line--) {
    }
  }
  char prefix[64];
  snprintf(prefix, sizeof prefix, "verdict: %s: ", word);
  if (strncmp(line, prefix, strlen(prefix)) != 0)
    CHECK_FAIL_("the last line is \"%s\", not a verdict of %s; the text:\n%s", line, word, text);
  CHECK_EQ(count_of(text, "verdict: "), 1);
  if (needle)
    CHECK_CONTAINS(line, needle);
}

/* The on-demand report of mr for `bytes`, in a buffer of the size it asks for (free it). */
static char *report_of(gpumem_resource *mr, size_t bytes) {
  size_t needed = 0;
  CHECK_STATUS(gpumem_resource_report(mr, bytes, 0, NULL, 0, &needed), GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK(needed > 1);
  for (;;) {
    char *buf = malloc(needed + 256); /* figures move while others allocate */
    CHECK(buf != NULL);
    gpumem_status status = gpumem_resource_report(mr, bytes, 0, buf, needed + 256, &needed);
    if (status == GPUMEM_OK)
      return buf;
    CHECK_STATUS(status, GPUMEM_ERR_INVALID_ARGUMENT);
    free(buf);
  }
}

static char *stats_of(gpumem_resource *mr) {
  size_t needed = 0;
  CHECK_STATUS(gpumem_resource_stats_json(mr, NULL, 0, &needed), GPUMEM_ERR_INVALID_ARGUMENT);
  for (;;) {
    char *buf = malloc(needed + 256);
    CHECK(buf != NULL);
    gpumem_status status = gpumem_resource_stats_json(mr, buf, needed + 256, &needed);
    if (status == GPUMEM_OK) {
      if (!json_valid(buf))
        CHECK_FAIL_("not valid JSON: %s", buf);
      /* Every node (not a reference) carries every figure. */
      int nodes = count_of(buf, "\"spec\":");
      static const char *const keys[] = {"\"live_bytes\":",
                                         "\"live_count\":",
                                         "\"reserved_bytes\":",
                                         "\"peak_live_bytes\":",
                                         "\"peak_reserved_bytes\":",
                                         "\"free_bytes\":",
                                         "\"free_blocks\":",
                                         "\"largest_free_block\":",
                                         "\"limit_bytes\":",
                                         "\"max_reserved_bytes\":",
                                         "\"upstream\":",
                                         "\"parts\":"};
      for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        CHECK_EQ(count_of(buf, keys[k]) - (k == 5 ? 1 : 0), nodes); /* and the device's */
      return buf;
    }
    CHECK_STATUS(status, GPUMEM_ERR_INVALID_ARGUMENT);
    free(buf);
  }
}

/* Allocates `count` blocks of `size` and frees every other one (the even ones): free memory
 * in pieces of `size` between live ones. */
static void allocate_and_punch(gpumem_resource *mr, void **ptrs, int count, size_t size) {
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(mr, size, NULL, &ptrs[i]));
  for (int i = 0; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], size, NULL));
}

static void free_odd(gpumem_resource *mr, void **ptrs, int count, size_t size) {
  for (int i = 1; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], size, NULL));
}

static void expect_out_of_memory(gpumem_resource *mr, size_t bytes) {
  void *ptr = NULL;
  CHECK_STATUS(gpumem_allocate(mr, bytes, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK(ptr == NULL);
  const char *message = gpumem_last_error_message();
  CHECK(strncmp(message, "out of memory: ", 15) == 0);
  CHECK(message[strlen(message) - 1] != '\n');
}

/* ---------------------------------------------------------------------------------------
 * Verdicts
 * ------------------------------------------------------------------------------------- */

static void test_fragmentation(void) {
  /* 64 MiB of device memory all in the pool, one chunk, half free in 4 MiB holes (a whole
   * free chunk would go back to the device before the failure, and the growth succeed). */
  gpumem_resource *pool = check_build("pool(cuda, initial=64MiB)");
  void *ptrs[16];
  allocate_and_punch(pool, ptrs, 16, 4 * MiB);
  expect_out_of_memory(pool, 8 * MiB);
  const char *message = gpumem_last_error_message();
  CHECK_CONTAINS(message, "\n  pool: live 32 MiB in 8, reserved 64 MiB, peak live 64 MiB, peak "
                          "reserved 64 MiB, free 32 MiB in 8 blocks, largest free block 4 MiB\n");
  CHECK_CONTAINS(message, "\n    cuda: live 64 MiB in 1, reserved 64 MiB");
  CHECK_CONTAINS(message, "\n  device 0: 0 B free of 64 MiB; gpumem's resources in this process "
                          "hold 64 MiB of it, 64 MiB through this one\n");
  check_verdict(message, "fragmentation",
                "pool holds 32 MiB free in 8 blocks, but its largest free block is 4 MiB, less "
                "than the 8 MiB needed; it could not grow: device 0 refused 8 MiB to cuda");
  /* On demand, from the figures alone: the same for 8 MiB; a 4 MiB hole fits 4 MiB. */
  char *report = report_of(pool, 8 * MiB);
  check_verdict(report, "fragmentation", "it could not grow: device 0 has less free memory");
  CHECK(strncmp(report, "  pool: live 32 MiB", 19) == 0);
  free(report);
  report = report_of(pool, 4 * MiB);
  check_verdict(report, "none", "pool has a free block of 4 MiB for the 4 MiB the request needs");
  free(report);
  report = report_of(pool, 0);
  check_verdict(report, "none", "no request to judge");
  free(report);
  free_odd(pool, ptrs, 16, 4 * MiB);
  CHECK_OK(gpumem_resource_release(pool));

  /* The same with a limit below the pool refusing its growth. */
  pool = check_build("pool(limit(cuda, max=16MiB), initial=16MiB)");
  allocate_and_punch(pool, ptrs, 4, 4 * MiB);
  expect_out_of_memory(pool, 8 * MiB);
  check_verdict(gpumem_last_error_message(), "fragmentation",
                "pool holds 8 MiB free in 2 blocks, but its largest free block is 4 MiB, less "
                "than the 8 MiB needed; it could not grow: limit allows 16 MiB, 16 MiB is "
                "allocated through it, and 8 MiB more was asked of it");
  CHECK_CONTAINS(gpumem_last_error_message(), "\n    limit: live 16 MiB in 1, ");
  free_odd(pool, ptrs, 4, 4 * MiB);
  CHECK_OK(gpumem_resource_release(pool));
  printf("fragmentation passed\n");
}

static void test_limits(void) {
  gpumem_resource *limit = check_build("limit(cuda, max=1MiB)");
  expect_out_of_memory(limit, 2 * MiB);
  check_verdict(gpumem_last_error_message(), "limit_reached",
                "limit allows 1 MiB, 0 B is allocated through it, and 2 MiB more was asked of it");
  char *report = report_of(limit, 2 * MiB);
  check_verdict(report, "limit_reached", "and the request needs 2 MiB more");
  free(report);
  report = report_of(limit, 1 * MiB);
  check_verdict(report, "none", "device 0 has 64 MiB free for the 1 MiB the request needs");
  free(report);
  CHECK_OK(gpumem_resource_release(limit));

  /* A limit above a fragmented pool refuses before the pool is asked: the limit, not the
   * pool's holes, is why. */
  limit = check_build("limit(pool(cuda, initial=16MiB), max=12MiB)");
  void *ptrs[4];
  allocate_and_punch(limit, ptrs, 3, 4 * MiB); /* 12 MiB free in holes of 4 and 8 MiB */
  expect_out_of_memory(limit, 12 * MiB);
  check_verdict(gpumem_last_error_message(), "limit_reached",
                "limit allows 12 MiB, 4 MiB is allocated through it, and 12 MiB more was asked");
  CHECK_CONTAINS(gpumem_last_error_message(), "free 12 MiB in 2 blocks, largest free block 8 MiB");
  free_odd(limit, ptrs, 3, 4 * MiB);
  CHECK_OK(gpumem_resource_release(limit));

  /* A pool at its maximum. */
  gpumem_resource *pool = check_build("pool(cuda, initial=4MiB, max=8MiB)");
  void *ptr;
  CHECK_OK(gpumem_allocate(pool, 4 * MiB, NULL, &ptr));
  expect_out_of_memory(pool, 8 * MiB);
  check_verdict(gpumem_last_error_message(), "limit_reached",
                "pool may hold at most 8 MiB from its upstream and holds 4 MiB, and 8 MiB more "
                "was asked of it");
  CHECK_CONTAINS(gpumem_last_error_message(), "maximum 8 MiB\n");
  report = report_of(pool, 8 * MiB);
  check_verdict(report, "limit_reached", "the request needs 8 MiB more");
  free(report);
  CHECK_OK(gpumem_deallocate(pool, ptr, 4 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(pool));
  printf("limits passed\n");
}

static void test_device_full(void) {
  gpumem_resource *holder = check_build("cuda"), *cuda = check_build("cuda");
  void *held;
  CHECK_OK(gpumem_allocate(holder, 40 * MiB, NULL, &held));
  expect_out_of_memory(cuda, 32 * MiB);
  check_verdict(gpumem_last_error_message(), "device_full",
                "device 0 refused 32 MiB to cuda; it has 24 MiB free of 64 MiB, and gpumem's "
                "resources in this process hold 40 MiB of it (0 B through this one)");
  char *report = report_of(cuda, 32 * MiB);
  check_verdict(report, "device_full",
                "device 0 has less free memory than the 32 MiB the request needs");
  free(report);
  /* Physical memory for vmm, under a pool. */
  gpumem_resource *pool = check_build("pool(vmm)");
  expect_out_of_memory(pool, 32 * MiB);
  check_verdict(gpumem_last_error_message(), "device_full", "to vmm; it has 24 MiB free");
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_deallocate(holder, held, 40 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(holder));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("device full passed\n");
}

static void test_settled_causes(void) {
  gpumem_resource *fixed = check_build("fixed_size(cuda, block=1KiB)");
  expect_out_of_memory(fixed, 2 * KiB);
  check_verdict(gpumem_last_error_message(), "too_large", "fixed_size can never serve 2 KiB");
  CHECK_OK(gpumem_resource_release(fixed));
  gpumem_resource *pool = check_build("pool(cuda, initial=2MiB)");
  expect_out_of_memory(pool, SIZE_MAX - MiB);
  check_verdict(gpumem_last_error_message(), "too_large", "pool can never serve");
  CHECK_OK(gpumem_resource_release(pool));
  gpumem_resource *faulty = check_build("faulty(cuda, fail_at=1, status=out_of_memory)");
  expect_out_of_memory(faulty, KiB);
  check_verdict(gpumem_last_error_message(), "injected", "faulty failed the request on purpose");
  CHECK_OK(gpumem_resource_release(faulty));
  printf("too large and injected passed\n");
}

/* Every host allocation one allocation makes fails in turn: each failure for lack of memory
 * is a host failure (or, where the simulated device's own host memory ran out, the device
 * refusing, as a driver would), and some are host failures. */
static void test_host_failure(const char *spec, size_t bytes) {
  int host_verdicts = 0;
  for (size_t k = 1; k < 64; k++) {
    gpumem_resource *mr = check_build(spec);
    size_t base = atomic_load(&host_allocations);
    atomic_store(&host_allocation_to_fail, base + k);
    void *ptr = NULL;
    gpumem_status status = gpumem_allocate(mr, bytes, NULL, &ptr);
    bool reached = atomic_load(&host_allocations) >= base + k;
    atomic_store(&host_allocation_to_fail, 0);
    if (status == GPUMEM_OK) {
      CHECK_OK(gpumem_deallocate(mr, ptr, bytes, NULL));
    } else {
      CHECK_STATUS(status, GPUMEM_ERR_OUT_OF_MEMORY);
      /* The simulated device keeps its memory in host memory: its own failing host
       * allocation is the device refusing, with memory free. */
      const char *message = gpumem_last_error_message();
      if (strstr(message, "verdict: device_full"))
        check_verdict(message, "device_full", "MiB free of 64 MiB");
      else
        check_verdict(message, "host_failure", "could not get the host memory it needed");
      host_verdicts += strstr(message, "verdict: host_failure") != NULL;
    }
    CHECK_OK(gpumem_resource_release(mr));
    if (!reached) /* the allocation made fewer host allocations: all were failed once */
      break;
  }
  CHECK(host_verdicts > 0);
  printf("host failure in %s passed (%d host_failure verdicts)\n", spec, host_verdicts);
}

/* The host out of memory for the report itself: the verdict alone, from the cause. */
static void test_report_without_host_memory(void) {
  gpumem_resource *limit = check_build("limit(cuda, max=1MiB)");
  char buf[64];
  memset(buf, 'x', sizeof buf);
  size_t needed = 7;
  atomic_store(&host_allocations_fail_from, atomic_load(&host_allocations) + 1);
  void *ptr;
  gpumem_status status = gpumem_allocate(limit, 2 * MiB, NULL, &ptr);
  char message[1200];
  snprintf(message, sizeof message, "%s", gpumem_last_error_message());
  gpumem_status report_status = gpumem_resource_report(limit, MiB, 0, buf, sizeof buf, &needed);
  gpumem_status json_status = gpumem_resource_stats_json(limit, buf, sizeof buf, &needed);
  atomic_store(&host_allocations_fail_from, 0);
  CHECK_STATUS(status, GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK(strncmp(message, "out of memory: allocating 2 MiB", 31) == 0);
  check_verdict(message, "limit_reached", "as limit said when it refused (the host had no memory");
  CHECK_STATUS(report_status, GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_STATUS(json_status, GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(needed, 7);
  for (size_t i = 0; i < sizeof buf; i++)
    CHECK_EQ(buf[i], 'x');
  CHECK_OK(gpumem_resource_release(limit));

  /* A cause noted inside (an arena's global pool at its maximum), which only a walk finds. */
  gpumem_resource *arena = check_build("arena(cuda, size=4MiB, max=4MiB)");
  expect_out_of_memory(arena, 8 * MiB);
  check_verdict(gpumem_last_error_message(), "limit_reached",
                "pool may hold at most 4 MiB from its upstream and holds 4 MiB");
  atomic_store(&host_allocations_fail_from, atomic_load(&host_allocations) + 1);
  status = gpumem_allocate(arena, 8 * MiB, NULL, &ptr);
  snprintf(message, sizeof message, "%s", gpumem_last_error_message());
  atomic_store(&host_allocations_fail_from, 0);
  CHECK_STATUS(status, GPUMEM_ERR_OUT_OF_MEMORY);
  check_verdict(message, "unexplained", "no cause known (the host had no memory left");
  CHECK_OK(gpumem_resource_release(arena));
  printf("report without host memory passed\n");
}

/* ---------------------------------------------------------------------------------------
 * User resources
 * ------------------------------------------------------------------------------------- */

typedef struct user_state {
  gpumem_resource *inner; /* NULL: refuses everything with a message of its own */
  bool query_sets_message;
  bool closes_after_one; /* forwards its first allocation, then refuses as above */
  int allocations;
} user_state;

static gpumem_status user_allocate(void *state, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  user_state *s = state;
  if (!s->inner || (s->closes_after_one && s->allocations > 0)) {
    gpumem_set_error_message("my arena is full");
    return GPUMEM_ERR_OUT_OF_MEMORY;
  }
  s->allocations++;
  return gpumem_allocate_aligned(s->inner, bytes, alignment, stream, ptr);
}

static gpumem_status user_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                     gpumem_stream stream) {
  return gpumem_deallocate_aligned(((user_state *)state)->inner, ptr, bytes, alignment, stream);
}

static gpumem_status user_query(void *state, gpumem_query what, uint64_t *out) {
  user_state *s = state;
  if (s->query_sets_message)
    gpumem_set_error_message("a message set by the user's query");
  if (what != GPUMEM_QUERY_RESERVED_BYTES || !s->inner)
    return GPUMEM_ERR_UNSUPPORTED;
  return gpumem_resource_query(s->inner, GPUMEM_QUERY_RESERVED_BYTES, out);
}

static gpumem_resource *user_resource(const char *name, user_state *state) {
  gpumem_user_resource_ops ops = {.size = sizeof ops,
                                  .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
                                  .allocate = user_allocate,
                                  .deallocate = user_deallocate,
                                  .query = user_query,
                                  .name = name};
  gpumem_resource *mr;
  CHECK_OK(gpumem_user_resource_create(0, &ops, state, &mr));
  return mr;
}

static void test_user_resources(void) {
  /* Its own word: unexplained, named by it, its message on the first line. */
  user_state refusing = {0};
  gpumem_resource *mine = user_resource("mine", &refusing);
  expect_out_of_memory(mine, KiB);
  CHECK_CONTAINS(gpumem_last_error_message(), "my arena is full");
  check_verdict(gpumem_last_error_message(), "unexplained",
                "mine said it has no memory for 1 KiB: \"my arena is full\"");

  /* A user resource over it passes its words on. */
  user_state forwards_to_mine = {.inner = mine};
  gpumem_resource *outer = user_resource("outer", &forwards_to_mine);
  expect_out_of_memory(outer, KiB);
  check_verdict(gpumem_last_error_message(), "unexplained",
                "outer said it has no memory for 1 KiB: \"my arena is full\"");
  CHECK_OK(gpumem_resource_release(outer));
  CHECK_OK(gpumem_resource_release(mine));

  /* A pool over it that cannot grow: the pool's message quotes the user's words. */
  user_state closing = {.inner = check_build("cuda"), .closes_after_one = true};
  gpumem_resource *closing_mr = user_resource("mine", &closing);
  gpumem_resource *over_mine = NULL;
  gpumem_pool_options one_mib = {.initial_size = MiB};
  CHECK_OK(gpumem_pool_create(closing_mr, &one_mib, &over_mine));
  expect_out_of_memory(over_mine, 4 * MiB);
  CHECK_CONTAINS(gpumem_last_error_message(), "its upstream could not give more memory");
  check_verdict(gpumem_last_error_message(), "unexplained",
                "mine said it has no memory for 4 MiB: \"my arena is full\" (gpumem cannot see");
  CHECK_OK(gpumem_resource_release(over_mine));
  CHECK_OK(gpumem_resource_release(closing_mr));
  CHECK_OK(gpumem_resource_release(closing.inner));

  /* Over a gpumem resource the device refuses: the cause passes up, one report (the
   * outer's), a query that sets a message changes nothing of it. */
  user_state over = {.inner = check_build("cuda"), .query_sets_message = true};
  gpumem_resource *forwarding = user_resource("forwarding", &over);
  expect_out_of_memory(forwarding, 128 * MiB);
  check_verdict(gpumem_last_error_message(), "device_full", "refused 128 MiB to forwarding");
  CHECK_EQ(count_of(gpumem_last_error_message(), "\n  device 0: "), 1);
  CHECK_CONTAINS(gpumem_last_error_message(), "\n  forwarding: live 0 B in 0, reserved 0 B");

  /* A pool over it: its line, with the figure its query gives. */
  gpumem_resource *pool = NULL;
  gpumem_pool_options options = {.initial_size = 4 * MiB};
  CHECK_OK(gpumem_pool_create(forwarding, &options, &pool));
  char *report = report_of(pool, MiB);
  CHECK_CONTAINS(report, "\n    forwarding: live 4 MiB in 1, reserved 4 MiB, peak live 4 MiB\n");
  check_verdict(report, "none", "pool has a free block of 4 MiB");
  free(report);
  free(stats_of(pool));
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_resource_release(forwarding));
  CHECK_OK(gpumem_resource_release(over.inner));

  /* A name that JSON must escape: quotes, a backslash, a newline, bytes that are not UTF-8,
   * and UTF-8 that is. */
  user_state plain = {.inner = check_build("cuda")};
  gpumem_resource *odd = user_resource("a \"b\"\\c\nd\x01\xff\xc3\xa9", &plain);
  char *json = stats_of(odd);
  CHECK_CONTAINS(json, "\"kind\":\"a \\\"b\\\"\\\\c\\u000ad\\u0001\\ufffd\xc3\xa9\"");
  free(json);
  CHECK_OK(gpumem_resource_release(odd));
  CHECK_OK(gpumem_resource_release(plain.inner));
  printf("user resources passed\n");
}

/* ---------------------------------------------------------------------------------------
 * Trees, buffers, threads
 * ------------------------------------------------------------------------------------- */

static void test_trees(void) {
  gpumem_resource *binning = check_build("binning(pool(cuda, initial=4MiB))");
  void *small, *large;
  CHECK_OK(gpumem_allocate(binning, KiB, NULL, &small));
  CHECK_OK(gpumem_allocate(binning, 2 * MiB, NULL, &large));
  char *report = report_of(binning, 16 * MiB);
  CHECK(strncmp(report, "  binning: live 2.001 MiB in 2, ", 32) == 0);
  CHECK_CONTAINS(report, "\n    pool: live 4 MiB in 2, ");
  CHECK_CONTAINS(report, "\n      cuda: ");
  CHECK_CONTAINS(report, "\n    bin 1 KiB: fixed_size: live 1 KiB in 1, reserved 2 MiB, ");
  CHECK_CONTAINS(report, "\n      pool (the same resource as above)\n");
  free(report);
  char *json = stats_of(binning);
  CHECK(strncmp(json, "{\"format\":\"gpumem.stats\",\"version\":1,\"device\":{\"index\":0,", 55) ==
        0);
  CHECK_CONTAINS(json, "\"complete\":true,\"resource\":{\"id\":0,\"kind\":\"binning\",");
  CHECK_CONTAINS(json, "\"parts\":[{\"role\":\"bin\",\"size\":1024,\"resource\":{\"id\":3,\"kind\":"
                       "\"fixed_size\",");
  CHECK_CONTAINS(json, "\"upstream\":{\"ref\":1,\"kind\":\"pool\"}");
  free(json);
  CHECK_OK(gpumem_deallocate(binning, small, KiB, NULL));
  CHECK_OK(gpumem_deallocate(binning, large, 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(binning));

  gpumem_resource *arena = check_build("arena(cuda, size=16MiB)");
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  CHECK_OK(gpumem_allocate(arena, KiB, stream, &small));
  report = report_of(arena, KiB);
  CHECK_CONTAINS(report, "\n    global: pool: live 4 MiB in 1, reserved 16 MiB");
  char line[64];
  snprintf(line, sizeof line, "\n    stream 0x%llx: pool: live 1 KiB in 1, ",
           (unsigned long long)(uintptr_t)stream);
  CHECK_CONTAINS(report, line);
  CHECK(strstr(report, "arena_superblocks") == NULL); /* a line with nothing to say */
  free(report);
  json = stats_of(arena);
  CHECK_CONTAINS(json, "{\"role\":\"global\",\"resource\":{");
  snprintf(line, sizeof line, "{\"role\":\"stream\",\"stream\":\"0x%llx\",\"resource\":{",
           (unsigned long long)(uintptr_t)stream);
  CHECK_CONTAINS(json, line);
  CHECK_CONTAINS(json, "\"kind\":\"arena_superblocks\"");
  free(json);
  CHECK_OK(gpumem_deallocate(arena, small, KiB, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(arena));

  /* More parts than a first guess holds (20 bins), all one resource: written once. */
  gpumem_binning_options no_bins = {.no_exponent_bins = 1};
  gpumem_resource *cuda = check_build("cuda"), *bins;
  CHECK_OK(gpumem_binning_create(cuda, &no_bins, &bins));
  for (int i = 0; i < 20; i++)
    CHECK_OK(gpumem_binning_add_bin(bins, (size_t)(i + 1) * KiB, cuda));
  json = stats_of(bins);
  CHECK_EQ(count_of(json, "{\"role\":\"bin\","), 20);
  CHECK_EQ(count_of(json, "{\"ref\":1,\"kind\":\"cuda\"}"), 20);
  free(json);
  CHECK_OK(gpumem_resource_release(bins));
  /* A chain deeper than a report holds: cut, and said so. */
  gpumem_resource *top = cuda;
  for (int i = 0; i < 70; i++) {
    gpumem_limit_options options = {.maximum_size = GPUMEM_DEFAULT_ALIGNMENT * 1024};
    gpumem_resource *next;
    CHECK_OK(gpumem_limit_create(top, &options, &next));
    CHECK_OK(gpumem_resource_release(top)); /* the chain keeps it */
    top = next;
  }
  json = stats_of(top);
  CHECK_CONTAINS(json, "\"complete\":false,");
  free(json);
  report = report_of(top, KiB);
  CHECK_CONTAINS(report, "(more resources not shown: the tree is larger or deeper than a report "
                         "holds)\n");
  check_verdict(report, "none", NULL);
  free(report);
  CHECK_OK(gpumem_resource_release(top));

  /* Every kind of resource writes valid JSON. */
  static const char *const specs[] = {
      "cuda",
      "managed",
      "async",
      "pinned_host",
      "vmm",
      "pool(vmm)",
      "aligned(prefetch(retry(limit(faulty(pool(cuda, initial=2MiB)), max=1GiB))))",
      "fixed_size(arena(cuda))",
      "binning(binning(pool(cuda)))"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gpumem_resource *mr = check_build(specs[i]);
    free(stats_of(mr));
    free(report_of(mr, MiB));
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("trees passed\n");
}

static void test_buffers(void) {
  gpumem_resource *limit = check_build("limit(cuda, max=1MiB)");
  size_t needed = 0;
  CHECK_FAILS_WITH(gpumem_resource_report(limit, MiB, 0, NULL, 0, &needed),
                   GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_resource_report: it needs a buffer of");
  CHECK_CONTAINS(gpumem_last_error_message(), "(none given: this call asks for the size)");
  CHECK(needed > 100);
  /* One byte short: refused, untouched, the size said. */
  char *buf = malloc(needed + 1);
  CHECK(buf != NULL);
  memset(buf, 'x', needed + 1);
  size_t said = 0;
  CHECK_STATUS(gpumem_resource_report(limit, MiB, 0, buf, needed - 1, &said),
               GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK_EQ(said, needed);
  char expected[160];
  snprintf(expected, sizeof expected,
           "needs a buffer of %zu bytes (with its NUL); the buffer has %zu", needed, needed - 1);
  CHECK_CONTAINS(gpumem_last_error_message(), expected);
  for (size_t i = 0; i <= needed; i++)
    CHECK_EQ(buf[i], 'x');
  CHECK_OK(gpumem_resource_report(limit, MiB, 0, buf, needed, NULL));
  CHECK_EQ(strlen(buf), needed - 1);
  CHECK_EQ(buf[needed], 'x');
  free(buf);
  /* JSON the same way. */
  CHECK_STATUS(gpumem_resource_stats_json(limit, NULL, 0, &needed), GPUMEM_ERR_INVALID_ARGUMENT);
  char small[16];
  memset(small, 'y', sizeof small);
  CHECK_FAILS_WITH(gpumem_resource_stats_json(limit, small, sizeof small, &said),
                   GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_resource_stats_json: it needs a buffer of");
  CHECK_EQ(said, needed);
  for (size_t i = 0; i < sizeof small; i++)
    CHECK_EQ(small[i], 'y');
  /* Bad arguments. */
  char room[4096];
  CHECK_FAILS_WITH(gpumem_resource_report(NULL, 0, 0, room, sizeof room, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "the resource is NULL");
  CHECK_FAILS_WITH(gpumem_resource_report(limit, 0, 0, NULL, 10, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "buf is NULL with a size");
  CHECK_FAILS_WITH(gpumem_resource_report(limit, KiB, 3000, room, sizeof room, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "alignment 3000 is not a power of two");
  CHECK_FAILS_WITH(gpumem_resource_report(limit, SIZE_MAX - 10, 0, room, sizeof room, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "overflows");
  CHECK_FAILS_WITH(gpumem_resource_stats_json(NULL, room, sizeof room, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "the resource is NULL");
  CHECK_FAILS_WITH(gpumem_resource_stats_json(limit, NULL, 10, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "buf is NULL with a size");
  /* An alignment counts in what the request needs. */
  CHECK_OK(gpumem_resource_report(limit, 512 * KiB, 1 * MiB, room, sizeof room, NULL));
  check_verdict(room, "limit_reached", "the request needs 1.5 MiB more");
  CHECK_OK(gpumem_resource_release(limit));
  printf("buffers passed\n");
}

typedef struct worker {
  gpumem_resource *mr;
  int seed;
  int failures;
  atomic_bool done;
} worker;

static void *allocate_a_lot(void *arg) {
  worker *w = arg;
  void *ptrs[16] = {0};
  size_t sizes[16] = {0};
  unsigned state = (unsigned)w->seed;
  for (int i = 0; i < 4000; i++) {
    state = state * 1103515245u + 12345u;
    int slot = (int)((state >> 16) % 16);
    if (ptrs[slot]) {
      CHECK_OK(gpumem_deallocate(w->mr, ptrs[slot], sizes[slot], NULL));
      ptrs[slot] = NULL;
      continue;
    }
    sizes[slot] = 256 + (state >> 8) % (3 * MiB);
    gpumem_status status = gpumem_allocate(w->mr, sizes[slot], NULL, &ptrs[slot]);
    if (status != GPUMEM_OK) { /* the limit, running out now and then */
      CHECK_STATUS(status, GPUMEM_ERR_OUT_OF_MEMORY);
      CHECK_CONTAINS(gpumem_last_error_message(), "\nverdict: ");
      ptrs[slot] = NULL;
      w->failures++;
    }
  }
  for (int slot = 0; slot < 16; slot++)
    if (ptrs[slot])
      CHECK_OK(gpumem_deallocate(w->mr, ptrs[slot], sizes[slot], NULL));
  atomic_store(&w->done, true);
  return NULL;
}

/* Threads allocate and free (and run out) while this one reads reports and JSON. */
static void test_threads(const char *spec) {
  enum { THREADS = 4 };
  gpumem_resource *mr = check_build(spec);
  pthread_t threads[THREADS];
  worker workers[THREADS];
  for (int t = 0; t < THREADS; t++) {
    workers[t] = (worker){mr, t + 1, 0, false};
    CHECK(pthread_create(&threads[t], NULL, allocate_a_lot, &workers[t]) == 0);
  }
  /* Until every thread is done, and at least a few times. */
  int reads = 0, running = THREADS;
  for (; running > 0 || reads < 20; reads++) {
    free(report_of(mr, 2 * MiB));
    free(stats_of(mr));
    running = 0;
    for (int t = 0; t < THREADS; t++)
      running += !atomic_load(&workers[t].done);
  }
  int failures = 0;
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    failures += workers[t].failures;
  }
  CHECK_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(mr));
  printf("threads on %s passed (%d reads, %d allocations out of memory)\n", spec, reads, failures);
}

int main(void) {
  gpumem_sim_config config = {.devices = 1, .memory = 64 * MiB};
  CHECK_OK(gpumem_sim_configure(&config));
  check_init_backend();
  check_json_checker();
  test_fragmentation();
  test_limits();
  test_device_full();
  test_settled_causes();
  test_host_failure("cuda", MiB);
  test_host_failure("pool(cuda, initial=2MiB)", 3 * MiB);
  test_host_failure("binning(pool(cuda, initial=2MiB))", 3 * MiB);
  test_host_failure("arena(cuda, size=8MiB)", KiB);
  test_host_failure("fixed_size(cuda, block=64KiB, prealloc=4)", KiB);
  test_host_failure("binning(pool(cuda, initial=2MiB))", KiB);
  test_host_failure("pool(vmm(piece=2MiB))", 3 * MiB);
  test_report_without_host_memory();
  test_user_resources();
  test_trees();
  test_buffers();
  test_threads("limit(pool(cuda, initial=16MiB), max=24MiB)");
  test_threads("limit(arena(cuda, size=16MiB), max=24MiB)");
  test_threads("binning(limit(pool(cuda, initial=16MiB), max=24MiB))");
  return 0;
}
