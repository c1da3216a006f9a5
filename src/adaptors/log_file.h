/* log_file.h: the file an event log (src/adaptors/log.c) writes, in RMM's CSV format: one
 * line per allocation, free or failed allocation, in the order the calls happened. The
 * file is shared by every log of the process that names it, and outlives a crash of the
 * process: see log_file.c for how, and for what is guaranteed. */
#ifndef GPUMEM_LOG_FILE_H
#define GPUMEM_LOG_FILE_H

#include "core/internal.h"

typedef struct gpumem__log_file gpumem__log_file;

typedef enum gpumem__log_action {
  GPUMEM__LOG_ALLOCATE,
  GPUMEM__LOG_FREE,
  GPUMEM__LOG_ALLOCATE_FAILURE
} gpumem__log_action;

/* Opens the file `pattern` names ("%p" becomes the process id, "%%" a '%') for writing:
 * truncated, with the header line, unless a log of this process already writes it, whose
 * file is shared (a new reference). GPUMEM_ERR_IO with the path and the reason when it
 * cannot be opened or written; GPUMEM_ERR_INVALID_ARGUMENT for an empty or too long name. */
gpumem_status gpumem__log_file_open(const char *pattern, gpumem__log_file **out);

/* Drops a reference; the last one makes the file end where its events end and closes it. */
void gpumem__log_file_close(gpumem__log_file *file);

/* Appends one event line. Never fails: a file that cannot be written any more was reported
 * once on stderr, and its later events are counted as dropped. Any thread, at once. */
void gpumem__log_file_event(gpumem__log_file *file, gpumem__log_action action, const void *ptr,
                            size_t bytes, gpumem_stream stream);

/* Makes the file hold exactly the events appended so far (written through, the file cut
 * where they end). GPUMEM_ERR_IO, with the reason, once writing has failed. */
gpumem_status gpumem__log_file_flush(gpumem__log_file *file);

/* As gpumem__log_file_flush, without a message: 0, or the errno that stopped the file. */
int gpumem__log_file_cut(gpumem__log_file *file);

/* The file's name, with the pattern's substitutions made. Valid while the file is open. */
const char *gpumem__log_file_path(const gpumem__log_file *file);

/* `name` with ".devN" before its extension (as Python's os.path.splitext finds it), for a
 * log per device: "log.csv" -> "log.dev1.csv", "log" -> "log.dev1". */
gpumem_status gpumem__log_device_name(const char *name, int device, char *out, size_t size);

/* Writes "file=NAME" for a spec: NAME in double quotes when it holds a character the
 * grammar ends a value at (or any not plainly part of a path). `as_pattern`: NAME is a file's
 * name, written so that it names that file again ('%' as "%%"); else a pattern as given. */
void gpumem__log_spec_file(const char *name, bool as_pattern, char *buf, size_t size);

/* The most address space a file is mapped into (0: the default, 1 TiB), for tests that
 * reach the end of it. Read when a file is opened. */
extern size_t gpumem__log_map_limit;

#endif /* GPUMEM_LOG_FILE_H */
