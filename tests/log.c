/* log.c: the log adaptor on the simulated device: its file in RMM's format exactly, and the
 * order, names and sharing of files.
 *
 * Format: every field of every line (the thread's kernel id, the local time, the action,
 * the pointer as %p prints it, the size, the stream in hex), a failed allocation logged and
 * flushed. Bad input: no name, an empty or too long name, a missing directory, a directory,
 * a directory without write permission, bad specs; each fails with the path and the reason
 * and leaves the upstream as it was. Names: "%p" and "%%", ".devN" before the extension,
 * quoted names in specs and their description building an equal resource, reinitialize
 * with logging (and refusing it without a name, keeping every device's resource).
 * Sharing: two logs naming one file write it in one order. Flush: the file ends in zeros
 * past the events until a flush cuts it. Placement: a pool over log(vmm) grows in place and
 * its growth and trim are logged. Threads: 8 threads allocating and freeing each other's
 * blocks log lines that replay (no pointer allocated while live, every free of a live
 * one). With the argument "env" (a CTest variant with GPUMEM_LOG_FILE set): every device's
 * default resource logs to the variable's file with ".devN". With "threads-log FILE": writes
 * a log of 4 threads on streams of their own freeing each other's blocks, and of the main
 * thread on the default stream, for log_replay_peak.sh. */
#include "check.h"
#include "log_check.h"

#include "adaptors/log_file.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

/* A value no successful call could leave in an out-parameter. */
static gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;

static void make_dir(void) {
  snprintf(log_dir, sizeof log_dir, "/tmp/gpumem-log-test-XXXXXX");
  CHECK(mkdtemp(log_dir) != NULL);
}

static void remove_dir(const char *path) {
  DIR *d = opendir(path);
  CHECK(d != NULL);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char child[512];
    snprintf(child, sizeof child, "%s/%s", path, e->d_name);
    struct stat info;
    CHECK(lstat(child, &info) == 0);
    if (S_ISDIR(info.st_mode)) {
      chmod(child, 0700);
      remove_dir(child);
    } else {
      CHECK(unlink(child) == 0);
    }
  }
  closedir(d);
  CHECK(rmdir(path) == 0);
}

static uint64_t device_used(void) {
  uint64_t used = 0;
  CHECK_OK(gpumem_sim_device_used(0, &used));
  return used;
}

/* ---- the format ---- */

/* Seconds since midnight of the line's time and of now, local time. */
static long line_seconds(const log_line *l) {
  return l->hour * 3600L + l->minute * 60L + l->second;
}

/* The log reads CLOCK_REALTIME; time() reads the coarse clock, which may lag it by a tick
 * past a second's turn, so the bounds read the log's clock. */
static long now_seconds(void) {
  struct timespec clock;
  clock_gettime(CLOCK_REALTIME, &clock);
  time_t now = clock.tv_sec;
  struct tm local;
  CHECK(localtime_r(&now, &local) != NULL);
  return local.tm_hour * 3600L + local.tm_min * 60L + local.tm_sec;
}

static void test_format(void) {
  const char *path = in_dir("format.csv");
  gpumem_resource *mr = build_log("cuda", path);
  char spec[512], expected[512];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  snprintf(expected, sizeof expected, "log(cuda, file=%s)", path);
  CHECK(strcmp(spec, expected) == 0);
  char name[256];
  CHECK_OK(gpumem_log_file_name(mr, name, sizeof name));
  CHECK(strcmp(name, path) == 0);
  CHECK_FAILS_WITH(gpumem_log_file_name(mr, name, 5), GPUMEM_ERR_INVALID_ARGUMENT,
                   "needs a buffer of");

  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  long before = now_seconds();
  void *a, *b, *c = (void *)0x77;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &a));
  CHECK_OK(gpumem_allocate(mr, 5000, stream, &b));
  CHECK_OK(gpumem_deallocate(mr, a, 1000, NULL));
  CHECK_OK(gpumem_deallocate(mr, b, 5000, stream));
  CHECK_FAILS_WITH(gpumem_allocate(mr, (size_t)1 << 50, stream, &c), GPUMEM_ERR_OUT_OF_MEMORY,
                   "log(cuda, file=");
  CHECK_PTR_EQ(c, (void *)0x77);
  long after = now_seconds();

  /* A failed allocation flushed the file: exact, no zeros past the events. */
  log_read r = log_read_file(path);
  CHECK_EQ(r.zero_bytes, 0);
  CHECK_EQ(r.count, 5);
  const struct {
    int action;
    void *ptr;
    size_t size;
    gpumem_stream stream;
  } want[] = {{LOG_ALLOCATE, a, 1000, NULL},
              {LOG_ALLOCATE, b, 5000, stream},
              {LOG_FREE, a, 1000, NULL},
              {LOG_FREE, b, 5000, stream},
              {LOG_FAILURE, NULL, (size_t)1 << 50, stream}};
  long thread = (long)syscall(SYS_gettid);
  for (size_t i = 0; i < r.count; i++) {
    const log_line *l = &r.lines[i];
    CHECK_EQ(l->thread, thread);
    CHECK_EQ(l->action, want[i].action);
    CHECK_PTR_EQ((void *)l->ptr, want[i].ptr);
    CHECK_U64_EQ(l->size, want[i].size);
    CHECK_U64_EQ(l->stream, (uintptr_t)want[i].stream);
    long seconds = line_seconds(l);
    CHECK((seconds >= before && seconds <= after) || after < before); /* midnight passed */
  }
  log_read_free(&r);
  /* The stream in hex, as RMM writes it: the line's text says so too. */
  FILE *f = fopen(path, "r");
  char text[4096];
  size_t length = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[length] = '\0';
  char hex[64];
  snprintf(hex, sizeof hex, ",5000,%lx\n", (unsigned long)(uintptr_t)stream);
  CHECK_CONTAINS(text, hex);
  CHECK_CONTAINS(text, ",allocate failure,(nil),1125899906842624,");
  CHECK_CONTAINS(text, ",1000,0\n");

  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(mr));
  printf("format: every field of each line as RMM writes it; a failure flushes the file\n");
}

/* ---- bad input ---- */

static void check_creation_fails(gpumem_resource *up, const char *name, gpumem_status status,
                                 const char *needle) {
  gpumem_log_options opts = {.file_name = name};
  gpumem_resource *out = untouched;
  CHECK_FAILS_WITH(gpumem_log_create(up, &opts, &out), status, needle);
  CHECK_PTR_EQ(out, untouched);
}

static void test_bad_input(void) {
  uint64_t used = device_used();
  gpumem_resource *up = check_build("pool(cuda, initial=1MiB)");
  gpumem_resource *out = untouched;
  gpumem_log_options opts = {.file_name = in_dir("x.csv")};
  CHECK_FAILS_WITH(gpumem_log_create(NULL, &opts, &out), GPUMEM_ERR_INVALID_ARGUMENT, "upstream");
  CHECK_FAILS_WITH(gpumem_log_create(up, &opts, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "out");
  CHECK_FAILS_WITH(gpumem_log_create(up, NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "GPUMEM_LOG_FILE");
  CHECK_PTR_EQ(out, untouched);
  check_creation_fails(up, "", GPUMEM_ERR_INVALID_ARGUMENT, "empty");
  char missing[300];
  snprintf(missing, sizeof missing, "%s/no/such/dir/log.csv", log_dir);
  check_creation_fails(up, missing, GPUMEM_ERR_IO, missing);
  CHECK_CONTAINS(gpumem_last_error_message(), "No such file or directory");
  check_creation_fails(up, log_dir, GPUMEM_ERR_IO, "Is a directory");
  CHECK_CONTAINS(gpumem_last_error_message(), log_dir);
  if (geteuid() != 0) { /* root writes anywhere */
    const char *locked = in_dir("locked");
    CHECK(mkdir(locked, 0500) == 0);
    char inside[300];
    snprintf(inside, sizeof inside, "%s/log.csv", locked);
    check_creation_fails(up, inside, GPUMEM_ERR_IO, "Permission denied");
  }
  static char longest[5000];
  memset(longest, 'a', sizeof longest - 1);
  check_creation_fails(up, longest, GPUMEM_ERR_INVALID_ARGUMENT, "longer than");
  /* Not a log adaptor. */
  char name[64];
  CHECK_FAILS_WITH(gpumem_log_flush(up), GPUMEM_ERR_INVALID_ARGUMENT, "not a log adaptor");
  CHECK_FAILS_WITH(gpumem_log_flush(NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_log_file_name(up, name, sizeof name), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a log adaptor");
  /* Bad specs, with a caret under what is wrong. */
  static const struct {
    const char *spec, *needle;
  } specs[] = {
      {"log(cuda, file=)", "bad value for 'file' of 'log' (expected a file name)"},
      {"log(cuda, file=\"\")", "bad value for 'file'"},
      {"log(cuda, file=\"a.csv)", "a quoted value of 'log' is not closed"},
      {"log(cuda, file=a b)", "expected ',' or ')'"},
      {"log(cuda)", "GPUMEM_LOG_FILE"},
      {"log", "missing upstream for 'log'"},
      {"log(cuda, file=a.csv, file=b.csv)", "given twice"},
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gpumem_resource *mr = untouched;
    CHECK_STATUS(gpumem_resource_from_spec(specs[i].spec, &mr), GPUMEM_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(gpumem_last_error_message(), specs[i].needle);
    CHECK_PTR_EQ(mr, untouched);
  }
  /* The upstream is as it was: it allocates, and goes with its last release. */
  void *ptr;
  CHECK_OK(gpumem_allocate(up, 4096, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(up, ptr, 4096, NULL));
  CHECK_OK(gpumem_resource_release(up));
  CHECK_U64_EQ(device_used(), used);
  printf("bad input: each failure names the path and why, and leaves the upstream as it was\n");
}

/* ---- names ---- */

static void check_device_name(const char *name, int device, const char *expected) {
  char out[256];
  CHECK_OK(gpumem__log_device_name(name, device, out, sizeof out));
  if (strcmp(out, expected) != 0)
    CHECK_FAIL_("\"%s\" for device %d is \"%s\", not \"%s\"", name, device, out, expected);
}

static bool exists(const char *path) {
  struct stat info;
  return stat(path, &info) == 0;
}

static void test_names(void) {
  /* As Python's os.path.splitext (RMM's naming). */
  check_device_name("log.csv", 0, "log.dev0.csv");
  check_device_name("a/b.c.csv", 3, "a/b.c.dev3.csv");
  check_device_name("a.b/log", 1, "a.b/log.dev1");
  check_device_name("a/.hidden", 2, "a/.hidden.dev2");
  check_device_name("a/..x.csv", 2, "a/..x.dev2.csv");
  check_device_name("x.", 0, "x.dev0.");

  char pattern[300], expected[300];
  snprintf(pattern, sizeof pattern, "%s/pid-%%p-100%%%%.csv", log_dir);
  snprintf(expected, sizeof expected, "%s/pid-%ld-100%%.csv", log_dir, (long)getpid());
  gpumem_log_options opts = {.file_name = pattern};
  gpumem_resource *up = check_build("cuda"), *mr;
  CHECK_OK(gpumem_log_create(up, &opts, &mr));
  char name[300];
  CHECK_OK(gpumem_log_file_name(mr, name, sizeof name));
  CHECK(strcmp(name, expected) == 0);
  CHECK(exists(expected));
  /* The description names that file again: '%' written as "%%". */
  char described[512], again[512];
  CHECK_OK(gpumem_resource_describe(mr, described, sizeof described));
  CHECK_CONTAINS(described, "-100%%.csv)");
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(up));
  mr = check_build(described);
  CHECK_OK(gpumem_resource_describe(mr, again, sizeof again));
  CHECK(strcmp(described, again) == 0);
  CHECK_OK(gpumem_resource_release(mr));

  /* A name with spaces, commas and parentheses, quoted in specs; the description builds an
   * equal resource. */
  const char *odd = in_dir("a log, (odd) = name.csv");
  mr = build_log("pool(cuda, initial=1)", odd);
  char spec[512];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  CHECK_CONTAINS(spec, ", file=\"");
  CHECK(exists(odd));
  CHECK_OK(gpumem_resource_release(mr));
  mr = check_build(spec);
  CHECK_OK(gpumem_resource_describe(mr, again, sizeof again));
  CHECK(strcmp(spec, again) == 0);
  CHECK_OK(gpumem_resource_release(mr));

  /* Reinitialize with logging: a file per device, ".devN" before the extension. */
  gpumem_reinitialize_options options = {.pool_allocator = 1,
                                         .devices = (const int[]){0, 1},
                                         .device_count = 2,
                                         .logging = 1,
                                         .log_file_name = in_dir("re.csv")};
  CHECK_OK(gpumem_reinitialize_spec(&options, 1, spec, sizeof spec));
  snprintf(expected, sizeof expected, "log(pool(vmm, initial=0, max=0), file=%s)",
           in_dir("re.dev1.csv"));
  CHECK(strcmp(spec, expected) == 0);
  CHECK_OK(gpumem_reinitialize(&options));
  for (int device = 0; device < 2; device++) {
    gpumem_resource *current;
    CHECK_OK(gpumem_get_per_device_resource(device, &current));
    CHECK(strcmp(gpumem_resource_name(current), "log") == 0);
    void *ptr;
    CHECK_OK(gpumem_allocate(current, 100, NULL, &ptr));
    CHECK_OK(gpumem_deallocate(current, ptr, 100, NULL));
    CHECK_OK(gpumem_log_flush(current));
    log_read r = log_read_file(in_dir(device ? "re.dev1.csv" : "re.dev0.csv"));
    CHECK_EQ(r.count, 2);
    log_read_free(&r);
  }
  /* Without a name (and GPUMEM_LOG_FILE unset): refused, every device keeps its resource. */
  gpumem_resource *before;
  CHECK_OK(gpumem_get_per_device_resource(0, &before));
  options.log_file_name = NULL;
  CHECK_FAILS_WITH(gpumem_reinitialize(&options), GPUMEM_ERR_INVALID_ARGUMENT, "GPUMEM_LOG_FILE");
  gpumem_resource *after;
  CHECK_OK(gpumem_get_per_device_resource(0, &after));
  CHECK_PTR_EQ(after, before);
  CHECK_OK(gpumem_set_per_device_resource(0, NULL));
  CHECK_OK(gpumem_set_per_device_resource(1, NULL));
  printf("names: %%p and %%%%, .devN before the extension, quoted names, reinitialize\n");
}

/* ---- sharing and flushing ---- */

static void test_sharing_and_flush(void) {
  const char *path = in_dir("shared.csv");
  gpumem_resource *first = build_log("cuda", path);
  gpumem_resource *second = build_log("pool(cuda, initial=1)", path);
  void *ptrs[20];
  for (int i = 0; i < 20; i++)
    CHECK_OK(gpumem_allocate(i % 2 ? second : first, 1000 + (size_t)i, NULL, &ptrs[i]));
  /* Until a flush the file runs past its events, in zeros. */
  log_read r = log_read_file(path);
  CHECK_EQ(r.count, 20);
  CHECK(r.zero_bytes > 0);
  for (int i = 0; i < 20; i++)
    CHECK_U64_EQ(r.lines[i].size, 1000 + (size_t)i);
  log_read_free(&r);
  CHECK_OK(gpumem_log_flush(second));
  r = log_read_file(path);
  CHECK_EQ(r.zero_bytes, 0);
  CHECK_EQ(r.count, 20);
  log_read_free(&r);
  for (int i = 0; i < 20; i++)
    CHECK_OK(gpumem_deallocate(i % 2 ? second : first, ptrs[i], 1000 + (size_t)i, NULL));
  CHECK_OK(gpumem_resource_release(first)); /* the second goes on writing the file */
  CHECK_OK(gpumem_allocate(second, 77, NULL, &ptrs[0]));
  CHECK_OK(gpumem_deallocate(second, ptrs[0], 77, NULL));
  CHECK_OK(gpumem_resource_release(second)); /* the last: the file cut where events end */
  r = log_read_file(path);
  CHECK_EQ(r.zero_bytes, 0);
  CHECK_EQ(r.count, 42);
  CHECK_U64_EQ(log_check_pairs(&r), 20 * 1000 + 190);
  log_read_free(&r);
  /* A new log of the file, once none writes it, starts it again. */
  gpumem_resource *third = build_log("cuda", path);
  CHECK_OK(gpumem_resource_release(third));
  r = log_read_file(path);
  CHECK_EQ(r.count, 0);
  log_read_free(&r);
  printf("sharing: two logs of one file write one order; a flush cuts the zeros\n");
}

/* ---- placement ---- */

static void test_placement(void) {
  const char *path = in_dir("placed.csv");
  gpumem_resource *log = build_log("vmm(piece=2MiB)", path);
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(log, &caps));
  CHECK_EQ(caps.places_at_address, 1);
  gpumem_resource *pool;
  CHECK_OK(gpumem_pool_create(log, NULL, &pool));
  CHECK_OK(gpumem_resource_release(log));
  void *a, *b;
  CHECK_OK(gpumem_allocate(pool, 3 * MiB, NULL, &a));
  CHECK_OK(gpumem_allocate(pool, 5 * MiB, NULL, &b));
  CHECK_OK(gpumem_deallocate(pool, a, 3 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, b, 5 * MiB, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  CHECK(released > 0);
  CHECK_OK(gpumem_resource_release(pool));
  log_read r = log_read_file(path);
  CHECK(log_count(&r, LOG_ALLOCATE) >= 1);
  uint64_t mapped = 0, unmapped = 0;
  for (size_t i = 0; i < r.count; i++) {
    CHECK_U64_EQ(r.lines[i].stream, 0);
    if (r.lines[i].action == LOG_ALLOCATE)
      mapped += r.lines[i].size;
    else if (r.lines[i].action == LOG_FREE)
      unmapped += r.lines[i].size;
  }
  CHECK_U64_EQ(unmapped, mapped); /* the pool gave back all it took */
  CHECK(mapped >= 8 * MiB);
  log_read_free(&r);
  printf("placement: a pool over log(vmm) grows in place; its growth and trim are logged\n");
}

/* ---- threads ---- */

enum { thread_count = 8, thread_ops = 4000, mailbox_size = 64 };

typedef struct mailbox {
  pthread_mutex_t lock;
  void *ptrs[mailbox_size];
  size_t sizes[mailbox_size];
  int count;
} mailbox;

typedef struct worker {
  gpumem_resource *mr;
  mailbox *box;
  unsigned seed;
  int ops;
  gpumem_stream stream;
} worker;

/* Allocates, frees its own blocks, and frees blocks other threads left in the mailbox. */
static void *work(void *arg) {
  worker *w = arg;
  void *mine[16] = {0};
  size_t sizes[16] = {0};
  uint64_t x = 0x9E3779B97F4A7C15ull * w->seed;
  for (int op = 0; op < w->ops; op++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int slot = (int)(x % 16);
    if (!mine[slot]) {
      sizes[slot] = 256 + (size_t)(x >> 40) % 100000;
      CHECK_OK(gpumem_allocate(w->mr, sizes[slot], w->stream, &mine[slot]));
      continue;
    }
    void *ptr = mine[slot];
    size_t size = sizes[slot];
    mine[slot] = NULL;
    pthread_mutex_lock(&w->box->lock);
    if ((x >> 20) % 2 && w->box->count < mailbox_size) { /* another thread frees it */
      w->box->ptrs[w->box->count] = ptr;
      w->box->sizes[w->box->count++] = size;
      ptr = NULL;
    } else if (w->box->count > 0) { /* free one another thread left, and this one */
      void *other = w->box->ptrs[--w->box->count];
      size_t other_size = w->box->sizes[w->box->count];
      pthread_mutex_unlock(&w->box->lock);
      CHECK_OK(gpumem_deallocate(w->mr, other, other_size, w->stream));
      pthread_mutex_lock(&w->box->lock);
    }
    pthread_mutex_unlock(&w->box->lock);
    if (ptr)
      CHECK_OK(gpumem_deallocate(w->mr, ptr, size, w->stream));
  }
  for (int slot = 0; slot < 16; slot++)
    if (mine[slot])
      CHECK_OK(gpumem_deallocate(w->mr, mine[slot], sizes[slot], w->stream));
  return NULL;
}

/* `threads` threads, each on a stream of its own when `streams`, `ops` operations each, on
 * mr; the blocks left in the mailbox freed at the end. */
static void run_workers(gpumem_resource *mr, int threads, int ops, bool streams) {
  mailbox box = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pthread_t ids[thread_count];
  worker workers[thread_count];
  for (int i = 0; i < threads; i++) {
    workers[i] = (worker){mr, &box, (unsigned)i + 1, ops, NULL};
    if (streams)
      CHECK_OK(gpumem_stream_create(0, &workers[i].stream));
    CHECK_EQ(pthread_create(&ids[i], NULL, work, &workers[i]), 0);
  }
  for (int i = 0; i < threads; i++)
    CHECK_EQ(pthread_join(ids[i], NULL), 0);
  for (int i = 0; i < box.count; i++)
    CHECK_OK(gpumem_deallocate(mr, box.ptrs[i], box.sizes[i], NULL));
  for (int i = 0; i < threads; i++) {
    if (workers[i].stream) {
      CHECK_OK(gpumem_stream_synchronize(workers[i].stream));
      CHECK_OK(gpumem_stream_destroy(workers[i].stream));
    }
  }
}

static void test_threads(void) {
  const char *path = in_dir("threads.csv");
  gpumem_resource *mr = build_log("pool(cuda, initial=64MiB)", path);
  run_workers(mr, thread_count, thread_ops, false);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(mr));
  log_read r = log_read_file(path);
  CHECK_EQ(r.zero_bytes, 0);
  CHECK_EQ(log_count(&r, LOG_ALLOCATE), log_count(&r, LOG_FREE));
  CHECK(r.count >= thread_count * thread_ops / 2);
  log_check_pairs(&r);
  long ids[thread_count + 1];
  int distinct = 0;
  for (size_t i = 0; i < r.count; i++) {
    bool seen = false;
    for (int k = 0; k < distinct; k++)
      seen |= ids[k] == r.lines[i].thread;
    if (!seen && distinct <= thread_count)
      ids[distinct++] = r.lines[i].thread;
  }
  CHECK(distinct == thread_count || distinct == thread_count + 1); /* the mailbox's rest */
  printf("threads: %d threads freeing each other's blocks log %zu lines that replay\n",
         thread_count, r.count);
  log_read_free(&r);
}

/* ---- GPUMEM_LOG_FILE ---- */

static void test_environment(void) {
  const char *pattern = getenv("GPUMEM_LOG_FILE");
  CHECK(pattern != NULL);
  CHECK_CONTAINS(gpumem_settings(), "GPUMEM_LOG_FILE=");
  for (int device = 0; device < 2; device++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_get_per_device_resource(device, &mr));
    CHECK(strcmp(gpumem_resource_name(mr), "log") == 0);
    char name[512], expected[512], base[512];
    CHECK_OK(gpumem_log_file_name(mr, name, sizeof name));
    snprintf(base, sizeof base, "%s", pattern);
    char *p = strstr(base, "%p");
    CHECK(p != NULL && strstr(base, ".csv") != NULL);
    *p = '\0';
    snprintf(expected, sizeof expected, "%s%ld%.*s.dev%d.csv", base, (long)getpid(),
             (int)(strstr(p + 2, ".csv") - (p + 2)), p + 2, device);
    if (strcmp(name, expected) != 0)
      CHECK_FAIL_("device %d logs to \"%s\", not \"%s\"", device, name, expected);
    void *ptr;
    CHECK_OK(gpumem_allocate(mr, 1234, NULL, &ptr));
    CHECK_OK(gpumem_deallocate(mr, ptr, 1234, NULL));
    CHECK_OK(gpumem_log_flush(mr));
    log_read r = log_read_file(name);
    CHECK_EQ(r.count, 2);
    CHECK_U64_EQ(r.lines[0].size, 1234);
    log_read_free(&r);
    CHECK(unlink(name) == 0);
  }
  /* The file of a log given none. */
  gpumem_resource *mr = check_build("log(cuda)");
  char name[512];
  CHECK_OK(gpumem_log_file_name(mr, name, sizeof name));
  CHECK(strstr(name, ".dev") == NULL);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK(unlink(name) == 0);
  printf("GPUMEM_LOG_FILE: every device's default resource logs to its .devN file\n");
}

int main(int argc, char **argv) {
  check_init_backend();
  if (!check_on_sim()) {
    printf("skipped: the log's tests read the simulated device's figures\n");
    return CHECK_SKIP_CODE;
  }
  if (argc > 1 && strcmp(argv[1], "env") == 0) {
    test_environment();
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "threads-log") == 0) { /* for log_replay_peak.sh */
    gpumem_resource *mr = build_log("pool(vmm)", argv[2]);
    void *first; /* this thread frees what the workers leave: it logs from the start */
    CHECK_OK(gpumem_allocate(mr, 4096, NULL, &first));
    CHECK_OK(gpumem_deallocate(mr, first, 4096, NULL));
    run_workers(mr, 4, 1000, true);
    CHECK_OK(gpumem_resource_release(mr));
    log_read r = log_read_file(argv[2]);
    printf("wrote %s: %zu events of 5 threads on 5 streams, peak live %llu bytes\n", argv[2],
           r.count, (unsigned long long)log_check_pairs(&r));
    log_read_free(&r);
    return 0;
  }
  make_dir();
  test_format();
  test_bad_input();
  test_names();
  test_sharing_and_flush();
  test_placement();
  test_threads();
  remove_dir(log_dir);
  return 0;
}
