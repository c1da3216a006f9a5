/* log.c: the log adaptor (RMM's logging_resource_adaptor): every allocation, free and
 * failed allocation through it becomes a line of a CSV file in RMM's format, which RMM's
 * replay benchmark, `gpumem-bench replay` and `python -m gpumem.plot` read. The file and
 * what it guarantees are log_file.c's; this file decides what is logged, and when.
 *
 * An allocation is logged after the upstream returned it, a free before it is passed on:
 * the file's order is then one in which memory freed on one thread and given out again on
 * another is freed first, so that a replay never finds a pointer allocated twice. (A free
 * the upstream refuses, a misuse, is logged too: it is what the program asked.) A failed
 * allocation is logged with its size and then flushed, so that a program that dies of it
 * leaves every event before it, in an exact file.
 *
 * Placement is forwarded (a pool over log(vmm) grows in place, as over vmm) and logged: a
 * range mapped at a chosen address as an allocation, a run of pieces unmapped by a pool's
 * trim as a free of that range, which the format cannot tell from a whole free. Such a log
 * shows what the pool held; the program's own allocations are logged above the pool.
 *
 * Like aligned and prefetch it reports its upstream's live figures, so its last release
 * is refused while the upstream has live allocations. */
#include "adaptors/adaptor.h"
#include "adaptors/log_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct log_resource {
  gpumem_resource header;
  gpumem__log_file *file;
} log_resource;

static GPUMEM_COLD gpumem_status log_failure(log_resource *self, size_t bytes, gpumem_stream stream,
                                             gpumem_status status) {
  gpumem__log_file_event(self->file, GPUMEM__LOG_ALLOCATE_FAILURE, NULL, bytes, stream);
  gpumem__log_file_cut(self->file); /* a failure of its own was reported on stderr */
  return gpumem__fail_through(&self->header, status);
}

static gpumem_status log_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                  gpumem_stream stream, void **ptr) {
  log_resource *self = (log_resource *)mr;
  gpumem_status status = mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, ptr);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return log_failure(self, bytes, stream, status);
  gpumem__log_file_event(self->file, GPUMEM__LOG_ALLOCATE, *ptr, bytes, stream);
  return GPUMEM_OK;
}

static gpumem_status log_deallocate(gpumem_resource *mr, void *ptr, size_t bytes, size_t alignment,
                                    gpumem_stream stream) {
  gpumem__log_file_event(((log_resource *)mr)->file, GPUMEM__LOG_FREE, ptr, bytes, stream);
  return mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
}

/* A placement probe that fails is no failed allocation: the pool above grows elsewhere. */
static gpumem_status log_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                     void **ptr) {
  gpumem_status status = mr->upstream->ops->allocate_at(mr->upstream, addr, bytes, ptr);
  if (status == GPUMEM_OK)
    gpumem__log_file_event(((log_resource *)mr)->file, GPUMEM__LOG_ALLOCATE, *ptr, bytes, NULL);
  return status;
}

static gpumem_status log_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                      int *allocations_added) {
  gpumem__log_file_event(((log_resource *)mr)->file, GPUMEM__LOG_FREE, (void *)addr, size, NULL);
  return mr->upstream->ops->unmap_pieces(mr->upstream, addr, size, allocations_added);
}

static void log_describe(const gpumem_resource *mr, char *buf, size_t size) {
  char file[8400]; /* a name of 4 KiB, every % doubled */
  gpumem__log_spec_file(gpumem__log_file_path(((const log_resource *)mr)->file), true, file,
                        sizeof file);
  gpumem__describe_over(mr, buf, size, ", %s", file);
}

static gpumem_status log_destroy(gpumem_resource *mr) {
  gpumem__log_file_close(((log_resource *)mr)->file);
  free(mr);
  return GPUMEM_OK;
}

static const gpumem__resource_ops log_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "log",
    .allocate = log_allocate,
    .deallocate = log_deallocate,
    .query = gpumem__forward_query,
    .describe = log_describe,
    .destroy = log_destroy,
    .allocate_at = log_allocate_at,
    .unmap_pieces = log_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
};

gpumem_status gpumem_log_create(gpumem_resource *upstream, const gpumem_log_options *opts,
                                gpumem_resource **out) {
  gpumem_status status = gpumem__check_adaptor_args("gpumem_log_create", upstream, out);
  if (status != GPUMEM_OK)
    return status;
  const char *name =
      opts && opts->file_name ? opts->file_name : gpumem__option_string(GPUMEM__OPT_LOG_FILE);
  if (!name)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_log_create: no file to log to: give one (file_name; 'file' in "
                        "a spec) or set GPUMEM_LOG_FILE");
  log_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_log_create: out of host memory");
  status = gpumem__log_file_open(name, &self->file);
  if (status != GPUMEM_OK) {
    free(self);
    return status;
  }
  gpumem__resource_init_pass_through(&self->header, &log_ops, upstream);
  *out = &self->header;
  return GPUMEM_OK;
}

static gpumem_status log_of(const char *caller, const gpumem_resource *mr,
                            const log_resource **self) {
  if (!mr || mr->ops != &log_ops)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s", caller,
                        mr ? "the resource is not a log adaptor" : "the resource is NULL");
  *self = (const log_resource *)mr;
  return GPUMEM_OK;
}

gpumem_status gpumem_log_flush(gpumem_resource *mr) {
  const log_resource *self = NULL;
  gpumem_status status = log_of("gpumem_log_flush", mr, &self);
  return status == GPUMEM_OK ? gpumem__log_file_flush(self->file) : status;
}

gpumem_status gpumem_log_file_name(const gpumem_resource *mr, char *buf, size_t size) {
  const log_resource *self = NULL;
  gpumem_status status = log_of("gpumem_log_file_name", mr, &self);
  if (status != GPUMEM_OK)
    return status;
  const char *path = gpumem__log_file_path(self->file);
  size_t need = strlen(path) + 1;
  if (!buf || size < need)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_log_file_name: the name needs a buffer of %zu bytes", need);
  memcpy(buf, path, need);
  return GPUMEM_OK;
}

gpumem_status gpumem__log_device_name(const char *name, int device, char *out, size_t size) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  /* The extension starts at the last dot that follows something other than dots. */
  const char *dot = strrchr(base, '.');
  const char *first = base;
  while (*first == '.')
    first++;
  if (!dot || dot < first)
    dot = name + strlen(name);
  int written = snprintf(out, size, "%.*s.dev%d%s", (int)(dot - name), name, device, dot);
  if (written < 0 || (size_t)written >= size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "log: the file name '%s' is too long", name);
  return GPUMEM_OK;
}

void gpumem__log_spec_file(const char *name, bool as_pattern, char *buf, size_t size) {
  bool plain = *name != '\0';
  for (const char *c = name; *c && plain; c++)
    plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            strchr("/._-+%~:@", *c);
  size_t used = (size_t)snprintf(buf, size, "%s", plain ? "file=" : "file=\"");
  for (const char *c = name; *c && used + 3 < size; c++) {
    buf[used++] = *c;
    if (*c == '%' && as_pattern)
      buf[used++] = '%';
  }
  if (!plain && used + 1 < size)
    buf[used++] = '"';
  buf[used < size ? used : size - 1] = '\0';
}
