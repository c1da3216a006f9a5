/* spec.c: resources from spec strings such as "faulty(async(initial=1GiB), fail_at=3)".
 *
 * One grammar (see gpumem.h) picks a resource wherever a user can: the C API, the
 * GPUMEM_RESOURCE variable, the tools and Python. Every resource kind is one entry of
 * spec_kinds below: its name, whether it wraps an upstream, its parameters with their types,
 * a line of help and a build function that turns parsed values into an options struct and
 * calls the public creation function. Adding a resource means adding one entry and one
 * build function; the parser, the error messages and the lists of known names follow.
 *
 * A spec is parsed whole before anything is built, so a typo near the end never creates
 * (and then destroys) a driver pool. Since a resource has at most one upstream, a parsed
 * spec is a chain, outermost first; it is built innermost first. A bad spec fails with
 * GPUMEM_ERR_INVALID_ARGUMENT and a message that says what is wrong, quotes the spec and
 * puts a caret under the offending character. */
#include "api/spec_names.h"
#include "core/internal.h"
#include "device/device.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deepest chain of resources a spec may describe; deeper is surely a mistake. */
#define SPEC_MAX_DEPTH 16
/* Most parameters a resource kind may have. */
#define SPEC_MAX_PARAMS 10
/* Longest stretch of a spec quoted in a message: the message buffer is 1 KiB. */
#define SPEC_QUOTE_WIDTH 160
/* Longest value token read; longer ones are bad values anyway. */
#define SPEC_MAX_VALUE 64

/* ---------------------------------------------------------------------------------------
 * The table of resource kinds
 * ------------------------------------------------------------------------------------- */

typedef enum spec_type {
  SPEC_SIZE,  /* bytes: "1GiB", "512M", "4096", "50%" of the device's memory */
  SPEC_COUNT, /* a plain unsigned integer, no units */
  SPEC_BOOL,  /* true | false */
  SPEC_ENUM,  /* one of the parameter's words */
  SPEC_TEXT   /* a file name: a word without spaces, commas, parentheses or '=', or any text
               * in double quotes (without a double quote) */
} spec_type;

/* A word an enum parameter accepts and the value it stands for. */
typedef struct spec_word {
  const char *word;
  uint64_t value;
} spec_word;

typedef struct spec_param {
  const char *key;
  spec_type type;
  const spec_word *words; /* SPEC_ENUM, and words a SPEC_COUNT also takes: ends with a NULL word */
  /* SPEC_COUNT: the values accepted, where the option it sets is narrower than 64 bits or
   * takes a range; both 0: any count. A value outside is a bad value, with a caret, rather
   * than one cut to the option's type. */
  uint64_t least, most;
} spec_param;

/* Parsed values, indexed by the parameter's position in its kind's entry. Bools are 0 or 1,
 * enums the value of their word. */
typedef struct spec_values {
  bool given[SPEC_MAX_PARAMS];
  uint64_t value[SPEC_MAX_PARAMS];
  const char *text[SPEC_MAX_PARAMS]; /* SPEC_TEXT: NUL-terminated copies, freed after building */
} spec_values;

typedef enum spec_upstream {
  SPEC_NO_UPSTREAM,      /* a base resource */
  SPEC_UPSTREAM_REQUIRED /* an adaptor or suballocator: exactly one unnamed argument */
} spec_upstream;

/* Builds one resource. `upstream` is NULL for base resources; the new resource retains it
 * if it keeps it. On failure the thread's message is set and *out is untouched. */
typedef gpumem_status (*spec_build_fn)(int device, gpumem_resource *upstream,
                                       const spec_values *values, gpumem_resource **out);

typedef struct spec_kind {
  const char *name;
  spec_upstream upstream;
  spec_param params[SPEC_MAX_PARAMS]; /* ends at the first NULL key */
  const char *help;
  spec_build_fn build;
} spec_kind;

static uint64_t value_or(const spec_values *values, int param, uint64_t fallback) {
  return values->given[param] ? values->value[param] : fallback;
}

/* ---- cuda ---- */

static gpumem_status build_cuda(int device, gpumem_resource *upstream, const spec_values *values,
                                gpumem_resource **out) {
  return gpumem_cuda_create(device, out);
}

/* ---- managed ---- */

enum { MANAGED_PREFETCH, MANAGED_READ_MOSTLY, MANAGED_PREFERRED_LOCATION, MANAGED_ACCESSED_BY };

static const spec_word location_words[] = {
    {"device", GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE},
    {"host", GPUMEM_ADVISE_PREFERRED_LOCATION_HOST},
    {NULL, 0},
};

static gpumem_status build_managed(int device, gpumem_resource *upstream, const spec_values *values,
                                   gpumem_resource **out) {
  gpumem_managed_options opts = {0};
  opts.prefetch = value_or(values, MANAGED_PREFETCH, 0) != 0;
  if (value_or(values, MANAGED_READ_MOSTLY, 0))
    opts.advice |= GPUMEM_ADVISE_READ_MOSTLY;
  opts.advice |= (unsigned)value_or(values, MANAGED_PREFERRED_LOCATION, 0);
  if (value_or(values, MANAGED_ACCESSED_BY, 0))
    opts.advice |= GPUMEM_ADVISE_ACCESSED_BY_DEVICE;
  return gpumem_managed_create(device, &opts, out);
}

/* ---- async ---- */

enum { ASYNC_RELEASE_THRESHOLD, ASYNC_INITIAL, ASYNC_IPC, ASYNC_POOL, ASYNC_MANAGED };

static const spec_word ipc_words[] = {
    {"none", GPUMEM_IPC_NONE},
    {"posix_fd", GPUMEM_IPC_POSIX_FD},
    {"fabric", GPUMEM_IPC_FABRIC},
    {NULL, 0},
};

static gpumem_status build_async(int device, gpumem_resource *upstream, const spec_values *values,
                                 gpumem_resource **out) {
  gpumem_async_options opts = {0};
  /* In the options struct 0 means "default" (keep everything); in a spec the user means
   * "keep nothing", which one byte gives. */
  opts.release_threshold = value_or(values, ASYNC_RELEASE_THRESHOLD, 0);
  if (values->given[ASYNC_RELEASE_THRESHOLD] && opts.release_threshold == 0)
    opts.release_threshold = 1;
  uint64_t initial = value_or(values, ASYNC_INITIAL, 0);
  if (initial > SIZE_MAX)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "async: initial size too large");
  opts.initial_size = (size_t)initial;
  opts.ipc_handle = (gpumem_ipc_handle)value_or(values, ASYNC_IPC, GPUMEM_IPC_NONE);
  opts.pool = (void *)(uintptr_t)value_or(values, ASYNC_POOL, 0);
  opts.managed = value_or(values, ASYNC_MANAGED, 0) != 0;
  return gpumem_async_create(device, &opts, out);
}

/* ---- pinned_host ---- */

enum { PINNED_MAPPED, PINNED_WRITE_COMBINED };

static gpumem_status build_pinned_host(int device, gpumem_resource *upstream,
                                       const spec_values *values, gpumem_resource **out) {
  gpumem_pinned_host_options opts = {0}; /* portable always: the resource makes it so */
  if (value_or(values, PINNED_MAPPED, 0))
    opts.flags |= GPUMEM_PINNED_DEVICE_MAPPED;
  if (value_or(values, PINNED_WRITE_COMBINED, 0))
    opts.flags |= GPUMEM_PINNED_WRITE_COMBINED;
  return gpumem_pinned_host_create(device, &opts, out);
}

/* ---- system ---- */

static gpumem_status build_system(int device, gpumem_resource *upstream, const spec_values *values,
                                  gpumem_resource **out) {
  return gpumem_system_create(device, out);
}

/* ---- faulty ---- */

enum { FAULTY_FAIL_AT, FAULTY_FAIL_EVERY, FAULTY_STATUS };

static const spec_word fault_status_words[] = {
    {"injected", GPUMEM_ERR_INJECTED_FAULT},
    {"out_of_memory", GPUMEM_ERR_OUT_OF_MEMORY},
    {"cuda", GPUMEM_ERR_CUDA},
    {NULL, 0},
};

static gpumem_status build_faulty(int device, gpumem_resource *upstream, const spec_values *values,
                                  gpumem_resource **out) {
  gpumem_faulty_options opts = {0};
  opts.fail_at = value_or(values, FAULTY_FAIL_AT, 0);
  opts.fail_every = value_or(values, FAULTY_FAIL_EVERY, 0);
  opts.status = (gpumem_status)value_or(values, FAULTY_STATUS, GPUMEM_ERR_INJECTED_FAULT);
  return gpumem_faulty_create(upstream, &opts, out);
}

/* ---- retry ---- */

enum { RETRY_ATTEMPTS };

/* More waits for the device than this is surely a mistake (each may take long). */
#define RETRY_MAX_ATTEMPTS 1000

static gpumem_status build_retry(int device, gpumem_resource *upstream, const spec_values *values,
                                 gpumem_resource **out) {
  uint64_t attempts = value_or(values, RETRY_ATTEMPTS, 1);
  if (attempts == 0 || attempts > RETRY_MAX_ATTEMPTS)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "retry: attempts must be from 1 to %d, not %llu", RETRY_MAX_ATTEMPTS,
                        (unsigned long long)attempts);
  return gpumem__retry_create(upstream, attempts, out);
}

/* ---- pool ---- */

enum { POOL_INITIAL, POOL_MAX, POOL_RELEASE_HOLES_OVER, POOL_RELEASE_HOLES_TIME };

/* release_holes_over=never: holes stay mapped. */
static const spec_word keep_holes_words[] = {{"never", GPUMEM_POOL_KEEP_HOLES}, {NULL, 0}};

static gpumem_status build_pool(int device, gpumem_resource *upstream, const spec_values *values,
                                gpumem_resource **out) {
  gpumem_pool_options opts = {0};
  opts.initial_size = (size_t)value_or(values, POOL_INITIAL, 0);
  opts.maximum_size = (size_t)value_or(values, POOL_MAX, 0);
  opts.release_holes_over = (unsigned)value_or(values, POOL_RELEASE_HOLES_OVER, 0);
  opts.release_holes_time = (unsigned)value_or(values, POOL_RELEASE_HOLES_TIME, 0);
  return gpumem_pool_create(upstream, &opts, out);
}

/* ---- arena ---- */

enum { ARENA_SIZE, ARENA_MAX, ARENA_SUPERBLOCK };

static gpumem_status build_arena(int device, gpumem_resource *upstream, const spec_values *values,
                                 gpumem_resource **out) {
  gpumem_arena_options opts = {0};
  opts.size = (size_t)value_or(values, ARENA_SIZE, 0);
  opts.maximum_size = (size_t)value_or(values, ARENA_MAX, 0);
  opts.superblock_size = (size_t)value_or(values, ARENA_SUPERBLOCK, 0);
  return gpumem_arena_create(upstream, &opts, out);
}

/* ---- binning ---- */

enum { BINNING_MIN, BINNING_MAX };

static gpumem_status build_binning(int device, gpumem_resource *upstream, const spec_values *values,
                                   gpumem_resource **out) {
  gpumem_binning_options opts = {.min_exponent = (int)value_or(values, BINNING_MIN, 8),
                                 .max_exponent = (int)value_or(values, BINNING_MAX, 20)};
  return gpumem_binning_create(upstream, &opts, out);
}

/* ---- fixed_size ---- */

enum { FIXED_BLOCK, FIXED_PREALLOC };

static gpumem_status build_fixed_size(int device, gpumem_resource *upstream,
                                      const spec_values *values, gpumem_resource **out) {
  gpumem_fixed_size_options opts = {0};
  opts.block_size = (size_t)value_or(values, FIXED_BLOCK, 0);
  opts.blocks_to_preallocate = (size_t)value_or(values, FIXED_PREALLOC, 0);
  return gpumem_fixed_size_create(upstream, &opts, out);
}

/* ---- vmm ---- */

enum { VMM_RESERVE, VMM_PIECE };

static gpumem_status build_vmm(int device, gpumem_resource *upstream, const spec_values *values,
                               gpumem_resource **out) {
  gpumem_vmm_options opts = {0};
  opts.reserve_size = (size_t)value_or(values, VMM_RESERVE, 0);
  opts.piece_size = (size_t)value_or(values, VMM_PIECE, 0);
  return gpumem_vmm_create(device, &opts, out);
}

/* ---- limit ---- */

enum { LIMIT_MAX };

static gpumem_status build_limit(int device, gpumem_resource *upstream, const spec_values *values,
                                 gpumem_resource **out) {
  gpumem_limit_options opts = {.maximum_size = (size_t)value_or(values, LIMIT_MAX, 0)};
  return gpumem_limit_create(upstream, &opts, out);
}

/* ---- aligned ---- */

enum { ALIGNED_ALIGNMENT, ALIGNED_THRESHOLD };

static gpumem_status build_aligned(int device, gpumem_resource *upstream, const spec_values *values,
                                   gpumem_resource **out) {
  gpumem_aligned_options opts = {0};
  opts.alignment = (size_t)value_or(values, ALIGNED_ALIGNMENT, 0);
  opts.threshold = (size_t)value_or(values, ALIGNED_THRESHOLD, 0);
  if (values->given[ALIGNED_ALIGNMENT] && opts.alignment == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "aligned: the alignment 0 is not a power of two");
  return gpumem_aligned_create(upstream, &opts, out);
}

/* ---- prefetch ---- */

static gpumem_status build_prefetch(int device, gpumem_resource *upstream,
                                    const spec_values *values, gpumem_resource **out) {
  return gpumem_prefetch_create(upstream, out);
}

/* ---- tracking ---- */

enum { TRACKING_STACKS, TRACKING_DEPTH };

static gpumem_status build_tracking(int device, gpumem_resource *upstream,
                                    const spec_values *values, gpumem_resource **out) {
  gpumem_tracking_options opts = {.capture_stacks = value_or(values, TRACKING_STACKS, 0) != 0,
                                  .stack_depth = (int)value_or(values, TRACKING_DEPTH, 0)};
  return gpumem_tracking_create(upstream, &opts, out);
}

/* ---- stats ---- */

enum { STATS_FLUSH_BYTES, STATS_FLUSH_COUNT };

static gpumem_status build_stats(int device, gpumem_resource *upstream, const spec_values *values,
                                 gpumem_resource **out) {
  gpumem_statistics_options opts = {.flush_bytes = (size_t)value_or(values, STATS_FLUSH_BYTES, 0),
                                    .flush_count = value_or(values, STATS_FLUSH_COUNT, 0)};
  if (values->given[STATS_FLUSH_BYTES] && opts.flush_bytes == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "stats: flush_bytes must be at least 1");
  return gpumem_statistics_create(upstream, &opts, out);
}

/* ---- log ---- */

enum { LOG_FILE };

static gpumem_status build_log(int device, gpumem_resource *upstream, const spec_values *values,
                               gpumem_resource **out) {
  gpumem_log_options opts = {.file_name = values->text[LOG_FILE]};
  return gpumem_log_create(upstream, &opts, out);
}

static const spec_kind spec_kinds[] = {
    {"cuda", SPEC_NO_UPSTREAM, {{NULL}}, "device memory from cuMemAlloc", build_cuda},
    {"managed",
     SPEC_NO_UPSTREAM,
     {
         [MANAGED_PREFETCH] = {"prefetch", SPEC_BOOL},
         [MANAGED_READ_MOSTLY] = {"read_mostly", SPEC_BOOL},
         [MANAGED_PREFERRED_LOCATION] = {"preferred_location", SPEC_ENUM, location_words},
         [MANAGED_ACCESSED_BY] = {"accessed_by_device", SPEC_BOOL},
     },
     "managed memory from cuMemAllocManaged, with optional advice",
     build_managed},
    {"async",
     SPEC_NO_UPSTREAM,
     {
         [ASYNC_RELEASE_THRESHOLD] = {"release_threshold", SPEC_SIZE},
         [ASYNC_INITIAL] = {"initial", SPEC_SIZE},
         [ASYNC_IPC] = {"ipc", SPEC_ENUM, ipc_words},
         [ASYNC_POOL] = {"pool", SPEC_COUNT, NULL, 0, UINTPTR_MAX},
         [ASYNC_MANAGED] = {"managed", SPEC_BOOL},
     },
     "a driver memory pool of its own, the program's pool=HANDLE, or managed=true: the device's "
     "default pool of managed memory (cuMemAllocFromPoolAsync)",
     build_async},
    {"pinned_host",
     SPEC_NO_UPSTREAM,
     {
         [PINNED_MAPPED] = {"mapped", SPEC_BOOL},
         [PINNED_WRITE_COMBINED] = {"write_combined", SPEC_BOOL},
     },
     "page-locked host memory from cuMemHostAlloc",
     build_pinned_host},
    {"system",
     SPEC_NO_UPSTREAM,
     {{NULL}},
     "host malloc, for devices with pageable access",
     build_system},
    {"faulty",
     SPEC_UPSTREAM_REQUIRED,
     {
         [FAULTY_FAIL_AT] = {"fail_at", SPEC_COUNT},
         [FAULTY_FAIL_EVERY] = {"fail_every", SPEC_COUNT},
         [FAULTY_STATUS] = {"status", SPEC_ENUM, fault_status_words},
     },
     "fails chosen allocations of the resource it wraps, for tests",
     build_faulty},
    {"retry",
     SPEC_UPSTREAM_REQUIRED,
     {
         [RETRY_ATTEMPTS] = {"attempts", SPEC_COUNT},
     },
     "on out of memory waits for the device and tries again, up to attempts times (default 1)",
     build_retry},
    {"pool",
     SPEC_UPSTREAM_REQUIRED,
     {
         [POOL_INITIAL] = {"initial", SPEC_SIZE},
         [POOL_MAX] = {"max", SPEC_SIZE},
         [POOL_RELEASE_HOLES_OVER] = {"release_holes_over", SPEC_COUNT, keep_holes_words, 0, 10000},
         [POOL_RELEASE_HOLES_TIME] = {"release_holes_time", SPEC_COUNT, NULL, 1, 100},
     },
     "coalescing pool with per-stream free lists over the resource it wraps",
     build_pool},
    {"arena",
     SPEC_UPSTREAM_REQUIRED,
     {
         [ARENA_SIZE] = {"size", SPEC_SIZE},
         [ARENA_MAX] = {"max", SPEC_SIZE},
         [ARENA_SUPERBLOCK] = {"superblock", SPEC_SIZE},
     },
     "a pool per stream over one global pool, for many threads at once",
     build_arena},
    {"binning",
     SPEC_UPSTREAM_REQUIRED,
     {
         /* The exponents binning takes (gpumem_binning_create checks min <= max). */
         [BINNING_MIN] = {"min", SPEC_COUNT, NULL, 8, 40},
         [BINNING_MAX] = {"max", SPEC_COUNT, NULL, 8, 40},
     },
     "fixed-size bins of 2^min to 2^max bytes (default 8 to 20), the rest to the upstream",
     build_binning},
    {"fixed_size",
     SPEC_UPSTREAM_REQUIRED,
     {
         [FIXED_BLOCK] = {"block", SPEC_SIZE},
         [FIXED_PREALLOC] = {"prealloc", SPEC_COUNT, NULL, 0, SIZE_MAX}, /* a size_t */
     },
     "one block size for every request, taken prealloc blocks at a time",
     build_fixed_size},
    {"vmm",
     SPEC_NO_UPSTREAM,
     {
         [VMM_RESERVE] = {"reserve", SPEC_SIZE},
         [VMM_PIECE] = {"piece", SPEC_SIZE},
     },
     "device memory mapped on demand into one reserved address range (cuMemMap)",
     build_vmm},
    {"limit",
     SPEC_UPSTREAM_REQUIRED,
     {
         [LIMIT_MAX] = {"max", SPEC_SIZE},
     },
     "refuses allocations past max bytes allocated through it (max is required)",
     build_limit},
    {"aligned",
     SPEC_UPSTREAM_REQUIRED,
     {
         [ALIGNED_ALIGNMENT] = {"alignment", SPEC_SIZE},
         [ALIGNED_THRESHOLD] = {"threshold", SPEC_SIZE},
     },
     "aligns requests of at least threshold bytes (default all) to alignment (default 256)",
     build_aligned},
    {"prefetch",
     SPEC_UPSTREAM_REQUIRED,
     {{NULL}},
     "prefetches each allocation of managed memory to the device on its stream",
     build_prefetch},
    {"tracking",
     SPEC_UPSTREAM_REQUIRED,
     {
         [TRACKING_STACKS] = {"stacks", SPEC_BOOL},
         [TRACKING_DEPTH] = {"depth", SPEC_COUNT, NULL, 1, 256},
     },
     "keeps every outstanding allocation (size, stream, time, with stacks its call stack)",
     build_tracking},
    {"stats",
     SPEC_UPSTREAM_REQUIRED,
     {
         [STATS_FLUSH_BYTES] = {"flush_bytes", SPEC_SIZE},
         [STATS_FLUSH_COUNT] = {"flush_count", SPEC_COUNT, NULL, 1, INT64_MAX},
     },
     "counts current, peak and total bytes and allocations through it, in a stack of counters",
     build_stats},
    {"log",
     SPEC_UPSTREAM_REQUIRED,
     {
         [LOG_FILE] = {"file", SPEC_TEXT},
     },
     "writes every allocation and free to a CSV file in RMM's format (default: GPUMEM_LOG_FILE)",
     build_log},
};

#define SPEC_KIND_COUNT (sizeof spec_kinds / sizeof spec_kinds[0])

/* ---------------------------------------------------------------------------------------
 * Lists for messages
 * ------------------------------------------------------------------------------------- */

/* Appends `word` to a ", "-separated list in buf. */
static void list_append(char *buf, size_t size, const char *word) {
  size_t used = strlen(buf);
  if (used < size)
    snprintf(buf + used, size - used, "%s%s", used ? ", " : "", word);
}

static void list_kinds(char *buf, size_t size) {
  buf[0] = '\0';
  for (size_t i = 0; i < SPEC_KIND_COUNT; i++)
    list_append(buf, size, spec_kinds[i].name);
}

/* "known: a, b" or "it takes none". */
static void list_params(const spec_kind *kind, char *buf, size_t size) {
  if (!kind->params[0].key) {
    snprintf(buf, size, "it takes none");
    return;
  }
  size_t prefix = (size_t)snprintf(buf, size, "known: ");
  for (int i = 0; i < SPEC_MAX_PARAMS && kind->params[i].key; i++)
    list_append(buf + prefix, size - prefix, kind->params[i].key);
}

/* What a value of the parameter looks like, for "bad value" messages. */
static void describe_expected(const spec_param *param, char *buf, size_t size) {
  switch (param->type) {
  case SPEC_SIZE:
    snprintf(buf, size, "a size such as 1GiB, 512M, 4096 or 50%%");
    return;
  case SPEC_COUNT:
    if (param->most)
      snprintf(buf, size, "a count from %llu to %llu", (unsigned long long)param->least,
               (unsigned long long)param->most);
    else
      snprintf(buf, size, "a count such as 3");
    for (const spec_word *w = param->words; w && w->word; w++)
      snprintf(buf + strlen(buf), size - strlen(buf), ", or %s", w->word);
    return;
  case SPEC_BOOL:
    snprintf(buf, size, "true or false");
    return;
  case SPEC_ENUM:
    snprintf(buf, size, "one of: ");
    size_t prefix = strlen(buf);
    for (const spec_word *w = param->words; w->word; w++)
      list_append(buf + prefix, size - prefix, w->word);
    return;
  case SPEC_TEXT:
    snprintf(buf, size,
             "a file name, in double quotes if it has spaces, commas, parentheses "
             "or '='");
    return;
  }
}

/* ---------------------------------------------------------------------------------------
 * The parser
 * ------------------------------------------------------------------------------------- */

typedef struct spec_node {
  const spec_kind *kind;
  bool has_upstream;
  spec_values values;
  size_t name_at, name_len; /* the name as written: for a resource the program named */
} spec_node;

/* The kind of a name the program defined (gpumem_spec_define): no parameters, no upstream,
 * built by looking the name up again. */
static const spec_kind named_kind = {"(named)",
                                     SPEC_NO_UPSTREAM,
                                     {{NULL}},
                                     "a resource the program named with gpumem_spec_define",
                                     NULL};

typedef struct spec_parser {
  const char *text;
  size_t pos;
  const gpumem__device_ops *dev;
  int device;
  bool have_total; /* total_memory read (only when a percentage needs it) */
  uint64_t total_memory;
  spec_node nodes[SPEC_MAX_DEPTH]; /* nodes[i + 1] is the upstream of nodes[i] */
  int count;
} spec_parser;

/* Copies the part of the spec around `at` into `line`, at most SPEC_QUOTE_WIDTH characters
 * with "..." where it is cut, and gives the caret's column in it. Control characters and
 * bytes outside ASCII become one character each, so the caret stays under its byte. */
static void quote_spec(const char *text, size_t at, char *line, size_t size, size_t *caret) {
  size_t len = strlen(text), start = 0, end = len;
  if (len > SPEC_QUOTE_WIDTH) {
    start = at > SPEC_QUOTE_WIDTH / 2 ? at - SPEC_QUOTE_WIDTH / 2 : 0;
    if (start + SPEC_QUOTE_WIDTH > len)
      start = len - SPEC_QUOTE_WIDTH;
    end = start + SPEC_QUOTE_WIDTH;
  }
  size_t used = 0;
  if (start > 0)
    used += (size_t)snprintf(line, size, "...");
  *caret = used + (at - start);
  for (size_t i = start; i < end && used + 1 < size; i++) {
    unsigned char c = (unsigned char)text[i];
    line[used++] = isspace(c) ? ' ' : (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
  }
  line[used] = '\0';
  if (end < len && used + 4 < size)
    strcat(line, "...");
}

/* Fails the parse: what is wrong, then the spec quoted, then a caret under byte `at`. */
__attribute__((format(printf, 3, 4))) static gpumem_status
spec_error(const spec_parser *p, size_t at, const char *format, ...) {
  char what[512], line[SPEC_QUOTE_WIDTH + 8];
  va_list args;
  va_start(args, format);
  vsnprintf(what, sizeof what, format, args);
  va_end(args);
  size_t caret;
  quote_spec(p->text, at, line, sizeof line, &caret);
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "invalid resource spec: %s\n  %s\n  %*s^", what,
                      line, (int)caret, "");
}

static char peek(const spec_parser *p) {
  return p->text[p->pos];
}

static void skip_space(spec_parser *p) {
  while (isspace((unsigned char)peek(p)))
    p->pos++;
}

/* Reads a name or key. Upper case is read too so that "CUDA" is reported as an unknown
 * resource rather than as a stray character; the table holds only lower case. */
static size_t read_word(spec_parser *p) {
  size_t start = p->pos;
  if (isalpha((unsigned char)peek(p)) || peek(p) == '_') {
    while (isalnum((unsigned char)peek(p)) || peek(p) == '_')
      p->pos++;
  }
  return p->pos - start;
}

static const spec_kind *find_kind(const char *name, size_t len) {
  for (size_t i = 0; i < SPEC_KIND_COUNT; i++) {
    if (strlen(spec_kinds[i].name) == len && strncmp(spec_kinds[i].name, name, len) == 0)
      return &spec_kinds[i];
  }
  return NULL;
}

bool gpumem__spec_is_builtin(const char *name, size_t len) {
  return find_kind(name, len) != NULL;
}

/* The kind of a word: a built-in one, or a name the program defined. */
static const spec_kind *find_kind_or_name(const char *name, size_t len) {
  const spec_kind *kind = find_kind(name, len);
  if (kind)
    return kind;
  gpumem_resource *named = gpumem__spec_name_lookup(name, len);
  if (!named)
    return NULL;
  gpumem_resource_release(named); /* looked up again when built */
  return &named_kind;
}

static int find_param(const spec_kind *kind, const char *key, size_t len) {
  for (int i = 0; i < SPEC_MAX_PARAMS && kind->params[i].key; i++) {
    if (strlen(kind->params[i].key) == len && strncmp(kind->params[i].key, key, len) == 0)
      return i;
  }
  return -1;
}

/* The device's total memory, read once per spec and only when a percentage asks. */
static gpumem_status total_memory(spec_parser *p, uint64_t *total) {
  if (!p->have_total) {
    size_t free_bytes = 0, total_bytes = 0;
    gpumem_status status = p->dev->mem_info(p->device, &free_bytes, &total_bytes);
    if (status != GPUMEM_OK)
      return gpumem__fail_context(status, "resource spec '%s': reading device %d's memory size",
                                  p->text, p->device);
    p->total_memory = total_bytes;
    p->have_total = true;
  }
  *total = p->total_memory;
  return GPUMEM_OK;
}

static bool parse_count(const char *token, uint64_t *out) {
  uint64_t value = 0;
  if (!*token)
    return false;
  for (const char *c = token; *c; c++) {
    if (!isdigit((unsigned char)*c))
      return false;
    unsigned digit = (unsigned)(*c - '0');
    if (value > (UINT64_MAX - digit) / 10)
      return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

/* Whether `token` is one of `words` (may be NULL); *out its value then. */
static bool match_word(const spec_word *words, const char *token, uint64_t *out) {
  for (const spec_word *w = words; w && w->word; w++) {
    if (strcmp(token, w->word) == 0) {
      *out = w->value;
      return true;
    }
  }
  return false;
}

/* Reads `token` as a value of `param`. GPUMEM_OK with *ok false means a bad value; another
 * status is a device failure (reading the memory size for a percentage). */
static gpumem_status parse_value(spec_parser *p, const spec_param *param, const char *token,
                                 uint64_t *out, bool *ok) {
  *ok = false;
  switch (param->type) {
  case SPEC_SIZE: {
    uint64_t percent_of = 0;
    if (strchr(token, '%')) {
      gpumem_status status = total_memory(p, &percent_of);
      if (status != GPUMEM_OK)
        return status;
    }
    size_t used = 0;
    *ok = gpumem__parse_size(token, percent_of, out, &used) && token[used] == '\0';
    return GPUMEM_OK;
  }
  case SPEC_COUNT:
    *ok = match_word(param->words, token, out) ||
          (parse_count(token, out) &&
           (!param->most || (*out >= param->least && *out <= param->most)));
    return GPUMEM_OK;
  case SPEC_BOOL:
    *ok = strcmp(token, "true") == 0 || strcmp(token, "false") == 0;
    if (*ok)
      *out = strcmp(token, "true") == 0;
    return GPUMEM_OK;
  case SPEC_ENUM:
    *ok = match_word(param->words, token, out);
    return GPUMEM_OK;
  case SPEC_TEXT: /* read by parse_text */
    return GPUMEM_OK;
  }
  return GPUMEM_OK;
}

/* A text value at p->pos: a quoted string or a word to the next separator, copied into the
 * node (*ok false for an empty one). A quote left open is a parse error. */
static gpumem_status parse_text(spec_parser *p, spec_node *node, int index, bool *ok) {
  size_t start = p->pos, length;
  *ok = false;
  if (peek(p) == '"') {
    const char *close = strchr(p->text + start + 1, '"');
    if (!close)
      return spec_error(p, start, "a quoted value of '%s' is not closed", node->kind->name);
    start++;
    length = (size_t)(close - (p->text + start));
    p->pos = (size_t)(close - p->text) + 1;
  } else { /* a quote inside a word would make a name no description could quote */
    while (peek(p) && !isspace((unsigned char)peek(p)) && !strchr(",()=\"", peek(p)))
      p->pos++;
    length = p->pos - start;
  }
  if (length == 0)
    return GPUMEM_OK;
  char *copy = malloc(length + 1);
  if (!copy)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "resource spec: out of host memory");
  memcpy(copy, p->text + start, length);
  copy[length] = '\0';
  node->values.text[index] = copy;
  *ok = true;
  return GPUMEM_OK;
}

/* key "=" value, with p->pos on the '='. */
static gpumem_status parse_param(spec_parser *p, spec_node *node, size_t key_pos, size_t key_len) {
  const char *key = p->text + key_pos;
  int index = find_param(node->kind, key, key_len);
  if (index < 0) {
    char known[256];
    list_params(node->kind, known, sizeof known);
    return spec_error(p, key_pos, "unknown parameter '%.*s' of '%s' (%s)", (int)key_len, key,
                      node->kind->name, known);
  }
  if (node->values.given[index])
    return spec_error(p, key_pos, "parameter '%.*s' of '%s' is given twice", (int)key_len, key,
                      node->kind->name);
  p->pos++; /* '=' */
  skip_space(p);
  if (node->kind->params[index].type == SPEC_TEXT) {
    size_t value_pos = p->pos;
    bool ok;
    gpumem_status status = parse_text(p, node, index, &ok);
    if (status != GPUMEM_OK)
      return status;
    if (!ok)
      return spec_error(p, value_pos, "bad value for '%.*s' of '%s' (expected a file name)",
                        (int)key_len, key, node->kind->name);
    node->values.given[index] = true;
    return GPUMEM_OK;
  }
  /* A value runs to the next separator; it is read whole so that "3x" is one bad value
   * rather than a 3 followed by a syntax error. */
  size_t value_pos = p->pos;
  while (peek(p) && !isspace((unsigned char)peek(p)) && !strchr(",()=", peek(p)))
    p->pos++;
  size_t value_len = p->pos - value_pos;
  char token[SPEC_MAX_VALUE + 1] = "";
  bool ok = false;
  if (value_len <= SPEC_MAX_VALUE) {
    memcpy(token, p->text + value_pos, value_len);
    token[value_len] = '\0';
    gpumem_status status =
        parse_value(p, &node->kind->params[index], token, &node->values.value[index], &ok);
    if (status != GPUMEM_OK)
      return status;
  }
  if (!ok) {
    char expected[256];
    describe_expected(&node->kind->params[index], expected, sizeof expected);
    return spec_error(p, value_pos, "bad value for '%.*s' of '%s' (expected %s)", (int)key_len, key,
                      node->kind->name, expected);
  }
  node->values.given[index] = true;
  return GPUMEM_OK;
}

static gpumem_status parse_spec(spec_parser *p, int depth);

/* An upstream spec or key "=" value, inside the parentheses of nodes[index]. */
static gpumem_status parse_arg(spec_parser *p, int index) {
  skip_space(p);
  size_t start = p->pos;
  size_t len = read_word(p);
  if (len == 0) {
    if (!peek(p))
      return spec_error(p, p->pos, "unbalanced parentheses: '(' after '%s' is not closed",
                        p->nodes[index].kind->name);
    return spec_error(p, p->pos, "expected a resource or key=value in the arguments of '%s'",
                      p->nodes[index].kind->name);
  }
  skip_space(p);
  if (peek(p) == '=')
    return parse_param(p, &p->nodes[index], start, len);
  const spec_kind *kind = p->nodes[index].kind;
  /* "fail_at 3": a parameter name where a resource may stand is a forgotten '='. */
  if (find_param(kind, p->text + start, len) >= 0 && !find_kind(p->text + start, len))
    return spec_error(p, p->pos, "expected '=' after parameter '%.*s' of '%s'", (int)len,
                      p->text + start, kind->name);
  if (kind->upstream == SPEC_NO_UPSTREAM)
    return spec_error(p, start, "'%s' takes no upstream (%s: %s)", kind->name, kind->name,
                      kind->help);
  if (p->nodes[index].has_upstream)
    return spec_error(p, start, "two upstreams for '%s' (it wraps exactly one resource)",
                      kind->name);
  p->nodes[index].has_upstream = true;
  p->pos = start;
  return parse_spec(p, index + 1);
}

/* "(" arg { "," arg } ")", with p->pos on the '(' after nodes[index]'s name. */
static gpumem_status parse_args(spec_parser *p, int index) {
  const char *name = p->nodes[index].kind->name;
  p->pos++;
  skip_space(p);
  if (peek(p) == ')')
    return spec_error(p, p->pos, "empty parentheses after '%s': write '%s' alone", name, name);
  for (;;) {
    gpumem_status status = parse_arg(p, index);
    if (status != GPUMEM_OK)
      return status;
    skip_space(p);
    if (peek(p) == ')') {
      p->pos++;
      return GPUMEM_OK;
    }
    if (peek(p) == '\0')
      return spec_error(p, p->pos, "unbalanced parentheses: '(' after '%s' is not closed", name);
    if (peek(p) != ',')
      return spec_error(p, p->pos, "expected ',' or ')' in the arguments of '%s'", name);
    p->pos++;
  }
}

/* name [ "(" args ")" ], becoming nodes[depth]. */
static gpumem_status parse_spec(spec_parser *p, int depth) {
  skip_space(p);
  size_t start = p->pos;
  if (depth >= SPEC_MAX_DEPTH)
    return spec_error(p, start, "nesting deeper than %d resources", SPEC_MAX_DEPTH);
  size_t len = read_word(p);
  if (len == 0)
    return spec_error(p, start, "expected a resource name");
  const spec_kind *kind = find_kind_or_name(p->text + start, len);
  if (!kind) {
    char known[256];
    list_kinds(known, sizeof known);
    return spec_error(p, start,
                      "unknown resource '%.*s' (known: %s), nor a name defined with "
                      "gpumem_spec_define",
                      (int)len, p->text + start, known);
  }
  spec_node *node = &p->nodes[depth];
  memset(node, 0, sizeof *node);
  node->kind = kind;
  node->name_at = start;
  node->name_len = len;
  p->count = depth + 1;
  skip_space(p);
  if (peek(p) == '(' && kind == &named_kind)
    return spec_error(p, p->pos,
                      "'%.*s' names a resource the program defined (gpumem_spec_define): it "
                      "takes no arguments",
                      (int)len, p->text + start);
  if (peek(p) == '(') {
    gpumem_status status = parse_args(p, depth);
    if (status != GPUMEM_OK)
      return status;
  }
  if (kind->upstream == SPEC_UPSTREAM_REQUIRED && !node->has_upstream)
    return spec_error(p, start, "missing upstream for '%s' (%s: %s), e.g. %s(cuda)", kind->name,
                      kind->name, kind->help, kind->name);
  return GPUMEM_OK;
}

static gpumem_status parse_whole(spec_parser *p) {
  skip_space(p);
  if (!peek(p))
    return spec_error(p, p->pos, "empty spec");
  gpumem_status status = parse_spec(p, 0);
  if (status != GPUMEM_OK)
    return status;
  skip_space(p);
  if (peek(p) == ')')
    return spec_error(p, p->pos, "unbalanced parentheses: ')' without a '('");
  if (peek(p))
    return spec_error(p, p->pos, "trailing text after the spec");
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Building
 * ------------------------------------------------------------------------------------- */

/* Drops a reference on a failure path without losing the message of the failure. */
static void release_keeping_message(gpumem_resource *mr) {
  if (!mr)
    return;
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", gpumem_last_error_message());
  /* A resource just built has no live allocations, so this release cannot fail; if it
   * did, its message must not hide the failure being reported. */
  if (gpumem_resource_release(mr) != GPUMEM_OK)
    gpumem__fail(GPUMEM_ERR_INTERNAL, "%s", saved);
}

/* A name the program defined: the resource it names now, if it is of the spec's device. */
static gpumem_status build_named(const spec_parser *p, const spec_node *node,
                                 gpumem_resource **out) {
  const char *name = p->text + node->name_at;
  int len = (int)node->name_len;
  gpumem_resource *mr = gpumem__spec_name_lookup(name, node->name_len);
  if (!mr)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "'%.*s' is no longer defined (gpumem_spec_define removed it)", len, name);
  if (mr->device != p->device) {
    gpumem_resource_release(mr);
    return gpumem__fail(GPUMEM_ERR_INVALID_DEVICE,
                        "'%.*s' names a resource of device %d; the spec is built for device %d",
                        len, name, mr->device, p->device);
  }
  *out = mr;
  return GPUMEM_OK;
}

/* Builds the chain innermost first. Each adaptor retains its upstream, so the reference
 * from building the upstream is dropped once the adaptor holds its own; on a failure the
 * one reference held is dropped, which destroys everything built so far. */
static gpumem_status build_chain(const spec_parser *p, gpumem_resource **out) {
  gpumem_resource *upstream = NULL;
  for (int i = p->count - 1; i >= 0; i--) {
    const spec_node *node = &p->nodes[i];
    gpumem_resource *built = NULL;
    gpumem_status status = node->kind == &named_kind
                               ? build_named(p, node, &built)
                               : node->kind->build(p->device, upstream, &node->values, &built);
    if (status != GPUMEM_OK) {
      release_keeping_message(upstream);
      return gpumem__fail_context(status, "resource spec '%s': building '%.*s'", p->text,
                                  (int)node->name_len, p->text + node->name_at);
    }
    if (upstream)
      gpumem_resource_release(upstream);
    upstream = built;
  }
  *out = upstream;
  return GPUMEM_OK;
}

gpumem_status gpumem_resource_from_spec_for_device(const char *spec, int device,
                                                   gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_resource_from_spec: out is NULL");
  if (!spec)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "invalid resource spec: the spec is NULL");
  gpumem_status status;
  const gpumem__device_ops *dev = gpumem__device_get(&status);
  if (!dev)
    return status;
  spec_parser parser = {.text = spec, .dev = dev};
  status = gpumem__resolve_device(dev, device, &parser.device);
  if (status != GPUMEM_OK)
    return status;
  status = parse_whole(&parser);
  if (status == GPUMEM_OK)
    status = build_chain(&parser, out);
  for (int i = 0; i < SPEC_MAX_DEPTH; i++)
    for (int k = 0; k < SPEC_MAX_PARAMS; k++)
      free((char *)parser.nodes[i].values.text[k]);
  return status;
}

gpumem_status gpumem_resource_from_spec(const char *spec, gpumem_resource **out) {
  return gpumem_resource_from_spec_for_device(spec, GPUMEM_CURRENT_DEVICE, out);
}
