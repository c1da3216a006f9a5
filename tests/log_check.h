/* log_check.h: reading an event log back in the tests. The whole file is checked against
 * RMM's format field by field (header, thread id, HH:MM:SS.microseconds, action, pointer as
 * %p prints it, size, stream in hex without a prefix); the zero bytes a killed process
 * leaves are counted and dropped first. log_check_pairs replays the lines as RMM's replay
 * does and fails on an allocation of a pointer that is live, or a free of one that is not.
 * Also the log tests' directory and their way of building a log adaptor. */
#ifndef GPUMEM_TESTS_LOG_CHECK_H
#define GPUMEM_TESTS_LOG_CHECK_H

#include "check.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { LOG_ALLOCATE, LOG_FREE, LOG_FAILURE };

typedef struct log_line {
  long thread;
  int hour, minute, second, microsecond;
  int action;
  uintptr_t ptr;
  size_t size;
  uintptr_t stream;
} log_line;

typedef struct log_read {
  size_t file_bytes, zero_bytes;
  log_line *lines;
  size_t count;
} log_read;

/* Reads digits (base 10 or 16, lower case, no leading zero unless the number is 0). */
static inline bool log_number(const char **p, int base, uint64_t *out) {
  const char *s = *p;
  uint64_t value = 0;
  size_t n = 0;
  for (;; n++) {
    char c = s[n];
    int digit = c >= '0' && c <= '9'                 ? c - '0'
                : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                     : -1;
    if (digit < 0)
      break;
    value = value * (uint64_t)base + (uint64_t)digit;
  }
  if (n == 0 || (n > 1 && s[0] == '0'))
    return false;
  *out = value;
  *p = s + n;
  return true;
}

static inline bool log_expect(const char **p, const char *text) {
  size_t n = strlen(text);
  if (strncmp(*p, text, n) != 0)
    return false;
  *p += n;
  return true;
}

static inline bool log_two(const char **p, int *out, int most) {
  const char *s = *p;
  if (!isdigit((unsigned char)s[0]) || !isdigit((unsigned char)s[1]))
    return false;
  *out = (s[0] - '0') * 10 + (s[1] - '0');
  *p += 2;
  return *out <= most;
}

/* One line, without its newline; false when it is not of the format. */
static inline bool log_parse_line(const char *s, log_line *line) {
  uint64_t value;
  if (!log_number(&s, 10, &value))
    return false;
  line->thread = (long)value;
  if (!log_expect(&s, ",") || !log_two(&s, &line->hour, 23) || !log_expect(&s, ":") ||
      !log_two(&s, &line->minute, 59) || !log_expect(&s, ":") || !log_two(&s, &line->second, 60) ||
      !log_expect(&s, "."))
    return false;
  line->microsecond = 0;
  for (int i = 0; i < 6; i++, s++) {
    if (!isdigit((unsigned char)*s))
      return false;
    line->microsecond = line->microsecond * 10 + (*s - '0');
  }
  if (log_expect(&s, ",allocate failure,"))
    line->action = LOG_FAILURE;
  else if (log_expect(&s, ",allocate,"))
    line->action = LOG_ALLOCATE;
  else if (log_expect(&s, ",free,"))
    line->action = LOG_FREE;
  else
    return false;
  if (log_expect(&s, "(nil)"))
    line->ptr = 0;
  else if (!log_expect(&s, "0x") || !log_number(&s, 16, &value) || value == 0)
    return false;
  else
    line->ptr = (uintptr_t)value;
  if (!log_expect(&s, ",") || !log_number(&s, 10, &value))
    return false;
  line->size = (size_t)value;
  if (!log_expect(&s, ",") || !log_number(&s, 16, &value))
    return false;
  line->stream = (uintptr_t)value;
  return *s == '\0';
}

/* The file's lines, checked; a line not of the format fails the test. */
static inline log_read log_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    CHECK_FAIL_("cannot open the log '%s'", path);
  log_read r = {0};
  size_t capacity = 1 << 16;
  char *text = malloc(capacity + 1);
  CHECK(text != NULL);
  for (size_t got; (got = fread(text + r.file_bytes, 1, capacity - r.file_bytes, f)) > 0;) {
    r.file_bytes += got;
    if (r.file_bytes == capacity) {
      capacity *= 2;
      text = realloc(text, capacity + 1);
      CHECK(text != NULL);
    }
  }
  fclose(f);
  size_t length = 0;
  for (size_t i = 0; i < r.file_bytes; i++) {
    if (text[i])
      text[length++] = text[i];
    else
      r.zero_bytes++;
  }
  text[length] = '\0';
  static const char header[] = "Thread,Time,Action,Pointer,Size,Stream\n";
  if (length < sizeof header - 1 || memcmp(text, header, sizeof header - 1) != 0)
    CHECK_FAIL_("the log '%s' does not start with RMM's header", path);
  if (length == 0 || text[length - 1] != '\n')
    CHECK_FAIL_("the log '%s' does not end with a whole line", path);
  size_t lines = 0;
  for (size_t i = 0; i < length; i++)
    lines += text[i] == '\n';
  r.lines = calloc(lines, sizeof *r.lines);
  CHECK(r.lines != NULL);
  char *line = text + sizeof header - 1;
  for (char *end; (end = strchr(line, '\n')) != NULL; line = end + 1) {
    *end = '\0';
    if (!log_parse_line(line, &r.lines[r.count]))
      CHECK_FAIL_("%s: line %zu is not of RMM's format: \"%s\"", path, r.count + 2, line);
    r.count++;
  }
  free(text);
  return r;
}

static inline void log_read_free(log_read *r) {
  free(r->lines);
  *r = (log_read){0};
}

/* The lines replay: no allocation of a pointer while it is live, no free of one that is not
 * (or with another size). Returns the peak of live bytes. */
static inline uint64_t log_check_pairs(const log_read *r) {
  size_t capacity = 64;
  while (capacity < 2 * r->count + 2)
    capacity *= 2;
  struct slot {
    uintptr_t ptr;
    size_t size;
    bool used, live;
  } *slots = calloc(capacity, sizeof *slots);
  CHECK(slots != NULL);
  uint64_t live = 0, peak = 0;
  for (size_t i = 0; i < r->count; i++) {
    const log_line *l = &r->lines[i];
    if (l->action == LOG_FAILURE)
      continue;
    size_t k = (size_t)((l->ptr * 0x9E3779B97F4A7C15ull) >> 20) & (capacity - 1);
    while (slots[k].used && slots[k].ptr != l->ptr)
      k = (k + 1) & (capacity - 1);
    slots[k].used = true;
    slots[k].ptr = l->ptr;
    if (l->action == LOG_ALLOCATE) {
      if (slots[k].live)
        CHECK_FAIL_("line %zu allocates %#lx, which is live", i + 2, (unsigned long)l->ptr);
      slots[k].live = true;
      slots[k].size = l->size;
      live += l->size;
      peak = live > peak ? live : peak;
    } else {
      if (!slots[k].live || slots[k].size != l->size)
        CHECK_FAIL_("line %zu frees %#lx (%zu bytes), which is not live with that size", i + 2,
                    (unsigned long)l->ptr, l->size);
      slots[k].live = false;
      live -= l->size;
    }
  }
  free(slots);
  return peak;
}

/* Lines of an action. */
static inline size_t log_count(const log_read *r, int action) {
  size_t n = 0;
  for (size_t i = 0; i < r->count; i++)
    n += r->lines[i].action == action;
  return n;
}

/* The directory a log test writes its files in (the test makes it with mkdtemp), and a file
 * there: four names may be in use at once. */
static char log_dir[64];

static inline const char *in_dir(const char *name) {
  static char path[4][256];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, 256, "%s/%s", log_dir, name);
  return p;
}

/* A log adaptor over `upstream` (a spec) writing `file`. */
static inline gpumem_resource *build_log(const char *upstream, const char *file) {
  char spec[512];
  snprintf(spec, sizeof spec, "log(%s, file=\"%s\")", upstream, file);
  return check_build(spec);
}

#endif /* GPUMEM_TESTS_LOG_CHECK_H */
