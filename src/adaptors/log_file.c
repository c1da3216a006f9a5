/* log_file.c: the file of an event log, written by every thread at once, in call order, and
 * kept whole when the process dies.
 *
 * The format is RMM's: a header "Thread,Time,Action,Pointer,Size,Stream", then one line per
 * event: the thread's kernel id, the local time as HH:MM:SS.microseconds, "allocate",
 * "free" or "allocate failure", the pointer as %p prints it ("0x7f..." or "(nil)"), the
 * size in bytes and the stream handle in hexadecimal without a prefix ("0" for the default
 * stream).
 *
 * A regular file is mapped into memory (MAP_SHARED), and each event is copied straight into
 * the mapping: once the copy is done, the line is in the kernel's page cache, part of the
 * file, whatever happens to the process afterwards (an abort, a fatal signal, the
 * out-of-memory killer's SIGKILL); only a crash of the machine loses it. A thread formats
 * its line on its own, then reserves its place with one atomic add on the file's position;
 * the reservation order is the file's order. That order is the order of the calls: the
 * adaptor logs an allocation after its upstream returned and a free before it is passed on,
 * so that memory freed and given out again appears freed first. No lock is taken on this
 * path and no other thread waits for it.
 *
 * The file is extended ahead of the writers (posix_fallocate, a MiB at a time, by whichever
 * thread first finds less than half a MiB left, without waiting if another does it), so
 * that a write never lands past its end (that would be SIGBUS), and a full disk is found
 * while extending, where it can be reported, rather than when a page is written back. While
 * the process runs, the file therefore ends in zeros up to the extension: a flush cuts it
 * where the events end. So do the last close, exit (an atexit handler, after which the file
 * is extended exactly by each later event), and an allocation that fails (the adaptor
 * flushes then, so that a program dying of it leaves an exact file). A process that dies
 * otherwise leaves the zeros: gpumem's readers skip them, and `tr -d '\000'` removes them
 * for others.
 *
 * A flush cuts the file under writers that are running: it sets a flag in the position
 * word, so that a writer reserving after it sees the flag and waits on the file's mutex;
 * every writer that reserved before writes below the cut. A failure to extend (disk full,
 * file size limit) closes the file the same way, for good: it is reported once on stderr,
 * the later events are counted as dropped, and allocations go on.
 *
 * Anything else (a pipe, a terminal, /dev/null, or a file that cannot be mapped) is written
 * through a 64 KiB buffer under the mutex, drained when full, at a flush, a failed
 * allocation and exit: a process killed outright loses what the buffer held.
 *
 * Every open file is in a registry, so that logs naming one file share it (in one order),
 * exit can flush them, and a child made by fork marks its copies closed: it must not write
 * into its parent's file. */
#include "adaptors/log_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The position word: bytes reserved, and two flags above them. */
#define CLOSED_BIT (1ull << 63)   /* no more events: dropped */
#define FLUSHING_BIT (1ull << 62) /* a flush is cutting the file: take the mutex */
#define POSITION_MASK (FLUSHING_BIT - 1)

#define EXTEND_STEP ((uint64_t)1 << 20)
#define DEFAULT_MAP_SIZE ((size_t)1 << 40)
#define SMALLEST_MAP_SIZE ((size_t)64 << 20)
#define STREAM_BUFFER ((size_t)64 << 10)
#define LINE_MAX_BYTES 128
#define PATH_MAX_BYTES 4096

static const char header[] = "Thread,Time,Action,Pointer,Size,Stream\n";

size_t gpumem__log_map_limit;

struct gpumem__log_file {
  /* Read by every event; written rarely. */
  char *map; /* NULL: a stream, written through `buffer` */
  size_t map_size;
  _Atomic uint64_t extended_to;       /* the file's size while mapped */
  _Atomic int64_t zone_offset;        /* seconds east of UTC, for the local time */
  _Atomic int64_t zone_checked_until; /* the offset is read again at this UTC second */
  bool forked;                        /* set in a child of fork: its parent's file */
  /* Written by every event. */
  _Alignas(128) _Atomic uint64_t reserved;
  _Atomic uint64_t dropped;
  /* The rest under `lock` (the registry's fields under registry_lock). */
  _Alignas(128) pthread_mutex_t lock;
  int fd;
  bool pipe;         /* a pipe or socket: SIGPIPE is held off around writes */
  bool exiting;      /* exit has run: extend exactly, write through */
  int error;         /* errno of the write that failed: nothing more is written */
  bool ahead_failed; /* extending ahead of the writers failed: let them find out */
  char *buffer;      /* a stream's */
  size_t buffered;
  uint64_t written; /* a stream's bytes written out */
  dev_t dev;
  ino_t ino;
  int references;
  gpumem__log_file *next;
  char path[];
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static gpumem__log_file *open_files;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

/* What a thread's lines start with, kept per thread: its kernel id (as RMM's logs have it;
 * the system call costs more than the rest of an event) and the text of the time up to
 * the second, "TID,HH:MM:SS.", made again when the second changes. A child of fork starts
 * its own (after_fork_in_child). */
typedef struct thread_prefix {
  pid_t id;
  time_t second;  /* of `text`, UTC; -1: none yet */
  int64_t offset; /* the zone's offset `text` was made with */
  size_t length;
  char text[32];
} thread_prefix;

static _Thread_local thread_prefix prefix = {.second = -1};

/* ---------------------------------------------------------------------------------------
 * Formatting a line
 * ------------------------------------------------------------------------------------- */

static const char digit_pairs[] = "00010203040506070809101112131415161718192021222324"
                                  "25262728293031323334353637383940414243444546474849"
                                  "50515253545556575859606162636465666768697071727374"
                                  "75767778798081828384858687888990919293949596979899";

/* Decimal, two digits a step from the right. */
static char *put_decimal(char *p, uint64_t value) {
  char digits[20];
  char *end = digits + sizeof digits, *d = end;
  while (value >= 100) {
    unsigned pair = (unsigned)(value % 100);
    value /= 100;
    d -= 2;
    memcpy(d, &digit_pairs[2 * pair], 2);
  }
  if (value >= 10) {
    d -= 2;
    memcpy(d, &digit_pairs[2 * value], 2);
  } else {
    *--d = (char)('0' + value);
  }
  memcpy(p, d, (size_t)(end - d));
  return p + (end - d);
}

/* Hexadecimal in lower case, without leading zeros ("0" for 0), as %p and std::hex. */
static char *put_hex(char *p, uint64_t value) {
  static const char hex[] = "0123456789abcdef";
  int digits = value ? (67 - __builtin_clzll(value)) / 4 : 1;
  for (int i = digits - 1; i >= 0; i--, value >>= 4)
    p[i] = hex[value & 15];
  return p + digits;
}

static char *put_two(char *p, unsigned value) {
  memcpy(p, &digit_pairs[2 * value], 2);
  return p + 2;
}

static char *put_text(char *p, const char *text, size_t length) {
  memcpy(p, text, length);
  return p + length;
}

/* The local time's offset from UTC, read again every quarter of an hour (zones change at
 * such times), so that an event pays for no localtime_r. */
static GPUMEM_NOINLINE int64_t read_zone(gpumem__log_file *file, time_t now) {
  struct tm local;
  int64_t offset = localtime_r(&now, &local) ? (int64_t)local.tm_gmtoff : 0;
  atomic_store_explicit(&file->zone_offset, offset, memory_order_relaxed);
  atomic_store_explicit(&file->zone_checked_until, (int64_t)(now - now % 900 + 900),
                        memory_order_relaxed);
  return offset;
}

static inline int64_t zone_offset(gpumem__log_file *file, time_t now) {
  if (GPUMEM_LIKELY(now < atomic_load_explicit(&file->zone_checked_until, memory_order_relaxed)))
    return atomic_load_explicit(&file->zone_offset, memory_order_relaxed);
  return read_zone(file, now);
}

/* Makes the thread's prefix for the second `now`: "TID,HH:MM:SS.", local time. */
static GPUMEM_NOINLINE void make_prefix(gpumem__log_file *file, time_t now) {
  if (prefix.id == 0)
    prefix.id = (pid_t)syscall(SYS_gettid);
  int64_t offset = zone_offset(file, now);
  unsigned day_second = (unsigned)((((int64_t)now + offset) % 86400 + 86400) % 86400);
  char *p = put_decimal(prefix.text, (uint64_t)prefix.id);
  *p++ = ',';
  p = put_two(p, day_second / 3600);
  *p++ = ':';
  p = put_two(p, day_second / 60 % 60);
  *p++ = ':';
  p = put_two(p, day_second % 60);
  *p++ = '.';
  prefix.length = (size_t)(p - prefix.text);
  prefix.second = now;
  prefix.offset = offset;
}

/* One event's line in `line` (LINE_MAX_BYTES); returns its length. */
static size_t format_line(gpumem__log_file *file, char *line, gpumem__log_action action,
                          const void *ptr, size_t bytes, gpumem_stream stream) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  /* Logs of several files may differ in zone only when one read it before a change and the
   * other after: the offset is checked against the file's too. */
  if (GPUMEM_UNLIKELY(now.tv_sec != prefix.second) ||
      GPUMEM_UNLIKELY(prefix.offset !=
                      atomic_load_explicit(&file->zone_offset, memory_order_relaxed)))
    make_prefix(file, now.tv_sec);
  memcpy(line, prefix.text, sizeof prefix.text);
  char *p = line + prefix.length;
  unsigned micro = (unsigned)(now.tv_nsec / 1000);
  p = put_two(p, micro / 10000);
  p = put_two(p, micro / 100 % 100);
  p = put_two(p, micro % 100);
  switch (action) {
  case GPUMEM__LOG_ALLOCATE:
    p = put_text(p, ",allocate,", 10);
    break;
  case GPUMEM__LOG_FREE:
    p = put_text(p, ",free,", 6);
    break;
  case GPUMEM__LOG_ALLOCATE_FAILURE:
    p = put_text(p, ",allocate failure,", 18);
    break;
  }
  if (ptr) {
    p = put_text(p, "0x", 2);
    p = put_hex(p, (uintptr_t)ptr);
  } else {
    p = put_text(p, "(nil)", 5);
  }
  *p++ = ',';
  p = put_decimal(p, bytes);
  *p++ = ',';
  p = put_hex(p, (uintptr_t)stream);
  *p++ = '\n';
  return (size_t)(p - line);
}

/* ---------------------------------------------------------------------------------------
 * Writing: failures
 * ------------------------------------------------------------------------------------- */

static uint64_t load(const _Atomic uint64_t *value) {
  return atomic_load_explicit(value, memory_order_acquire);
}

/* Stops the file for good after `what` failed with `error`, and says so once. Under the
 * mutex. A mapped file is cut where the events that could be written end. */
static GPUMEM_COLD void stop_writing(gpumem__log_file *file, int error, const char *what) {
  if (file->error)
    return;
  file->error = error;
  uint64_t reserved = atomic_fetch_or(&file->reserved, CLOSED_BIT) & POSITION_MASK;
  if (file->map) { /* cut where the events that can still be written end */
    uint64_t room = load(&file->extended_to);
    uint64_t end = reserved < room ? reserved : room;
    if (ftruncate(file->fd, (off_t)end) == 0)
      atomic_store_explicit(&file->extended_to, end, memory_order_release);
  }
  fprintf(stderr,
          "gpumem: log '%s': %s failed (%s): the log stops here, with %llu bytes written; "
          "allocations go on\n",
          file->path, what, strerror(error),
          (unsigned long long)(file->map ? load(&file->extended_to) : file->written));
}

/* ---------------------------------------------------------------------------------------
 * Writing a mapped file
 * ------------------------------------------------------------------------------------- */

/* Makes the file at least `need` bytes long (under the mutex): to the next MiB, or exactly
 * as asked after exit. False when it cannot be; a writer that needs the room stops the
 * file then, one extending ahead of need leaves the room there is to the writers. */
static bool ensure_room(gpumem__log_file *file, uint64_t need, bool ahead) {
  uint64_t room = load(&file->extended_to);
  if (need <= room)
    return true;
  if (file->error || (ahead && file->ahead_failed))
    return false;
  if (need > file->map_size) {
    if (ahead)
      file->ahead_failed = true;
    else
      stop_writing(file, EFBIG, "growing past the address space reserved for the log");
    return false;
  }
  uint64_t target = file->exiting ? need : (need + EXTEND_STEP - 1) / EXTEND_STEP * EXTEND_STEP;
  if (target > file->map_size)
    target = file->map_size;
  int error = posix_fallocate(file->fd, (off_t)room, (off_t)(target - room));
  if (error) {
    if (ahead)
      file->ahead_failed = true;
    else
      stop_writing(file, error, "extending the file");
    return false;
  }
  file->ahead_failed = false;
#ifdef MADV_POPULATE_WRITE
  madvise(file->map + (room & ~(uint64_t)4095), target - (room & ~(uint64_t)4095),
          MADV_POPULATE_WRITE);
#endif
  atomic_store_explicit(&file->extended_to, target, memory_order_release);
  return true;
}

/* Extends the file before writers reach its end; skipped when another thread holds the
 * mutex (it is extending, or flushing, which writers wait for anyway). */
static GPUMEM_NOINLINE void extend_ahead(gpumem__log_file *file, uint64_t end) {
  if (pthread_mutex_trylock(&file->lock) != 0)
    return;
  if (!file->exiting && load(&file->extended_to) - end < EXTEND_STEP / 2)
    ensure_room(file, end + EXTEND_STEP, true);
  pthread_mutex_unlock(&file->lock);
}

/* A reservation the fast path could not write: a flush was cutting the file, or the file
 * must grow first. */
static GPUMEM_NOINLINE void write_slowly(gpumem__log_file *file, uint64_t reserved,
                                         const char *line, size_t length) {
  uint64_t at = reserved & POSITION_MASK;
  pthread_mutex_lock(&file->lock);
  if (ensure_room(file, at + length, false))
    memcpy(file->map + at, line, length);
  else
    atomic_fetch_add_explicit(&file->dropped, 1, memory_order_relaxed);
  pthread_mutex_unlock(&file->lock);
}

static inline void write_mapped(gpumem__log_file *file, const char *line, size_t length) {
  uint64_t reserved = atomic_fetch_add(&file->reserved, length);
  if (GPUMEM_UNLIKELY(reserved & CLOSED_BIT)) {
    atomic_fetch_add_explicit(&file->dropped, 1, memory_order_relaxed);
    return;
  }
  /* Read after the reservation: a flush that cut the file before it is seen here. */
  uint64_t room = load(&file->extended_to), end = reserved + length;
  if (GPUMEM_UNLIKELY(reserved & FLUSHING_BIT) || GPUMEM_UNLIKELY(end > room)) {
    write_slowly(file, reserved, line, length);
    return;
  }
  memcpy(file->map + reserved, line, length);
  if (GPUMEM_UNLIKELY(room - end < EXTEND_STEP / 2))
    extend_ahead(file, end);
}

/* Cuts a mapped file where the reserved events end (under the mutex). Writers that reserved
 * before write below the cut; later ones find the flag and wait for the mutex. */
static void cut_mapped(gpumem__log_file *file) {
  uint64_t old = atomic_fetch_or(&file->reserved, FLUSHING_BIT);
  uint64_t end = old & POSITION_MASK;
  if (end < load(&file->extended_to) && ftruncate(file->fd, (off_t)end) == 0)
    atomic_store_explicit(&file->extended_to, end, memory_order_release);
  if (!(old & CLOSED_BIT))
    atomic_fetch_and(&file->reserved, ~FLUSHING_BIT);
}

/* ---------------------------------------------------------------------------------------
 * Writing a stream
 * ------------------------------------------------------------------------------------- */

/* Writes the buffer out (under the mutex): 0, or the errno of the write that failed. A pipe
 * whose reader is gone must fail the write with EPIPE, not kill the process with SIGPIPE:
 * the signal is blocked on this thread for the write, and one it raised is taken back. */
static int write_out(gpumem__log_file *file) {
  sigset_t pipe_signal, old_mask;
  if (file->pipe) {
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &old_mask);
  }
  int error = 0;
  for (size_t done = 0; done < file->buffered && !error;) {
    ssize_t wrote = write(file->fd, file->buffer + done, file->buffered - done);
    if (wrote > 0)
      done += (size_t)wrote;
    else if (wrote == 0 || errno != EINTR)
      error = wrote < 0 ? errno : EIO;
  }
  file->written += file->buffered;
  file->buffered = 0;
  if (file->pipe) {
    struct timespec no_wait = {0, 0};
    if (error == EPIPE)
      sigtimedwait(&pipe_signal, NULL, &no_wait);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  }
  return error;
}

static void drain(gpumem__log_file *file) {
  int error = write_out(file);
  if (error)
    stop_writing(file, error, "writing");
}

static void write_stream(gpumem__log_file *file, const char *line, size_t length) {
  pthread_mutex_lock(&file->lock);
  if (file->error) {
    atomic_fetch_add_explicit(&file->dropped, 1, memory_order_relaxed);
  } else {
    if (file->buffered + length > STREAM_BUFFER)
      drain(file);
    memcpy(file->buffer + file->buffered, line, length);
    file->buffered += length;
    if (file->exiting)
      drain(file);
  }
  pthread_mutex_unlock(&file->lock);
}

/* ---------------------------------------------------------------------------------------
 * Events and flushes
 * ------------------------------------------------------------------------------------- */

static void write_line(gpumem__log_file *file, const char *line, size_t length) {
  if (GPUMEM_LIKELY(file->map != NULL))
    write_mapped(file, line, length);
  else if (!file->forked) /* a stream's mutex may have been held when the process forked */
    write_stream(file, line, length);
}

void gpumem__log_file_event(gpumem__log_file *file, gpumem__log_action action, const void *ptr,
                            size_t bytes, gpumem_stream stream) {
  char line[LINE_MAX_BYTES];
  write_line(file, line, format_line(file, line, action, ptr, bytes, stream));
}

/* Makes the file end where its events end (under the mutex). */
static void flush_locked(gpumem__log_file *file) {
  if (file->map)
    cut_mapped(file);
  else if (!file->error)
    drain(file);
}

int gpumem__log_file_cut(gpumem__log_file *file) {
  if (file->forked)
    return 0;
  pthread_mutex_lock(&file->lock);
  flush_locked(file);
  int error = file->error;
  pthread_mutex_unlock(&file->lock);
  return error;
}

gpumem_status gpumem__log_file_flush(gpumem__log_file *file) {
  if (file->forked)
    return gpumem__fail(GPUMEM_ERR_IO,
                        "log '%s': this process is a fork of the one that writes the file: its "
                        "events are not logged (open a log of its own, e.g. with %%p in the name)",
                        file->path);
  int error = gpumem__log_file_cut(file);
  if (!error)
    return GPUMEM_OK;
  return gpumem__fail(
      GPUMEM_ERR_IO, "log '%s': writing failed (%s); %llu events were dropped", file->path,
      strerror(error),
      (unsigned long long)atomic_load_explicit(&file->dropped, memory_order_relaxed));
}

const char *gpumem__log_file_path(const gpumem__log_file *file) {
  return file->path;
}

/* ---------------------------------------------------------------------------------------
 * Exit and fork
 * ------------------------------------------------------------------------------------- */

/* Every open file written through, and extended exactly from now on: events after this
 * (frees in later exit handlers) keep the file exact. */
static void at_exit(void) {
  pthread_mutex_lock(&registry_lock);
  for (gpumem__log_file *file = open_files; file; file = file->next) {
    if (file->forked)
      continue;
    pthread_mutex_lock(&file->lock);
    file->exiting = true;
    flush_locked(file);
    pthread_mutex_unlock(&file->lock);
  }
  pthread_mutex_unlock(&registry_lock);
}

static void before_fork(void) {
  pthread_mutex_lock(&registry_lock);
}

static void after_fork_in_parent(void) {
  pthread_mutex_unlock(&registry_lock);
}

/* The child's copies of the files are its parent's files: closed, never written or cut. */
static void after_fork_in_child(void) {
  prefix = (thread_prefix){.second = -1};
  for (gpumem__log_file *file = open_files; file; file = file->next) {
    file->forked = true;
    atomic_fetch_or(&file->reserved, CLOSED_BIT);
  }
  pthread_mutex_unlock(&registry_lock);
}

static void install_handlers(void) {
  atexit(at_exit);
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

/* ---------------------------------------------------------------------------------------
 * Opening and closing
 * ------------------------------------------------------------------------------------- */

/* The name with "%p" replaced by the process id and "%%" by '%'. */
static gpumem_status expand_name(const char *pattern, char *path, size_t size) {
  size_t used = 0;
  for (const char *c = pattern; *c; c++) {
    char pid[24];
    const char *piece = c;
    size_t length = 1;
    if (c[0] == '%' && c[1] == 'p') {
      length = (size_t)snprintf(pid, sizeof pid, "%ld", (long)getpid());
      piece = pid;
      c++;
    } else if (c[0] == '%' && c[1] == '%') {
      c++;
    }
    if (used + length >= size)
      return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "log: the file name is longer than %zu bytes", size - 1);
    memcpy(path + used, piece, length);
    used += length;
  }
  path[used] = '\0';
  return GPUMEM_OK;
}

/* Maps as much address space as the system gives, from the limit down to 64 MiB: a log
 * writes at most that many bytes. */
static bool map_file(gpumem__log_file *file) {
  size_t size = gpumem__log_map_limit ? gpumem__log_map_limit : DEFAULT_MAP_SIZE;
  for (;;) {
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, file->fd, 0);
    if (map != MAP_FAILED) {
      file->map = map;
      file->map_size = size;
      return true;
    }
    if (size / 2 < SMALLEST_MAP_SIZE)
      return false;
    size /= 2;
  }
}

static void free_file(gpumem__log_file *file) {
  if (file->map)
    munmap(file->map, file->map_size);
  if (file->fd >= 0)
    close(file->fd);
  pthread_mutex_destroy(&file->lock);
  free(file->buffer);
  free(file);
}

static GPUMEM_COLD gpumem_status failed_to(const char *what, const char *path, int error) {
  return gpumem__fail(GPUMEM_ERR_IO, "log: cannot %s '%s': %s", what, path, strerror(error));
}

/* A new file of the registry over the open `fd`: truncated, mapped (or buffered), with the
 * header written at once, so that a disk that is full or a file that cannot grow fails the
 * creation rather than the first event. */
static gpumem_status start_file(int fd, const struct stat *info, bool readable, const char *path,
                                gpumem__log_file **out) {
  size_t path_size = strlen(path) + 1;
  size_t size = (sizeof(gpumem__log_file) + path_size + 127) / 128 * 128;
  gpumem__log_file *file = aligned_alloc(128, size);
  if (!file) {
    close(fd);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "log: out of host memory");
  }
  memset(file, 0, size);
  memcpy(file->path, path, path_size);
  file->fd = fd;
  file->dev = info->st_dev;
  file->ino = info->st_ino;
  file->pipe = S_ISFIFO(info->st_mode) || S_ISSOCK(info->st_mode);
  pthread_mutex_init(&file->lock, NULL);
  read_zone(file, time(NULL));
  if (S_ISREG(info->st_mode) && ftruncate(fd, 0) != 0) {
    int error = errno;
    free_file(file);
    return failed_to("truncate", path, error);
  }
  if (!(S_ISREG(info->st_mode) && readable && map_file(file)) &&
      !(file->buffer = malloc(STREAM_BUFFER))) {
    free_file(file);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "log: out of host memory");
  }
  size_t length = sizeof header - 1;
  int error;
  if (file->map) {
    uint64_t target = EXTEND_STEP < file->map_size ? EXTEND_STEP : file->map_size;
    error = posix_fallocate(fd, 0, (off_t)target);
    if (!error) {
      memcpy(file->map, header, length);
      atomic_store_explicit(&file->extended_to, target, memory_order_relaxed);
      atomic_store_explicit(&file->reserved, length, memory_order_relaxed);
    }
  } else {
    memcpy(file->buffer, header, length);
    file->buffered = length;
    error = write_out(file);
  }
  if (error) {
    free_file(file);
    return failed_to("write", path, error);
  }
  *out = file;
  return GPUMEM_OK;
}

gpumem_status gpumem__log_file_open(const char *pattern, gpumem__log_file **out) {
  if (!pattern || !*pattern)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "log: the file name is empty");
  char path[PATH_MAX_BYTES];
  gpumem_status status = expand_name(pattern, path, sizeof path);
  if (status != GPUMEM_OK)
    return status;
  pthread_once(&handlers_once, install_handlers);
  /* Read and write: a mapping needs both. A file that may only be written is buffered. A
   * FIFO opened for writing alone would wait for a reader; O_NONBLOCK (cleared once open)
   * makes that a failure instead. */
  const int flags = O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  bool readable = true;
  int fd = open(path, O_RDWR | flags, 0666);
  if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EISDIR)) {
    int first = errno;
    readable = false;
    fd = open(path, O_WRONLY | flags, 0666);
    if (fd < 0 && errno != ENXIO)
      errno = first;
  }
  if (fd < 0)
    return failed_to("open", path, errno);
  struct stat info;
  if (fstat(fd, &info) == 0 && S_ISFIFO(info.st_mode) && readable) {
    /* A pipe this log also reads would never tell it that its reader is gone (EPIPE): it
     * would fill up and block. Written only, it fails once the reader has gone. */
    close(fd);
    readable = false;
    if ((fd = open(path, O_WRONLY | flags, 0666)) < 0)
      return failed_to("open", path, errno == ENXIO ? EPIPE : errno);
  }
  if (fstat(fd, &info) != 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    int error = errno;
    close(fd);
    return failed_to("open", path, error);
  }
  pthread_mutex_lock(&registry_lock);
  gpumem__log_file *file = open_files;
  while (file && (file->forked || file->dev != info.st_dev || file->ino != info.st_ino))
    file = file->next;
  if (file) { /* another log writes it: share it, in one order */
    file->references++;
    close(fd);
  } else if ((status = start_file(fd, &info, readable, path, &file)) == GPUMEM_OK) {
    file->references = 1;
    file->next = open_files;
    open_files = file;
  }
  pthread_mutex_unlock(&registry_lock);
  if (status == GPUMEM_OK)
    *out = file;
  return status;
}

void gpumem__log_file_close(gpumem__log_file *file) {
  if (!file)
    return;
  pthread_mutex_lock(&registry_lock);
  bool last = --file->references == 0;
  if (last) {
    gpumem__log_file **link = &open_files;
    while (*link != file)
      link = &(*link)->next;
    *link = file->next;
  }
  pthread_mutex_unlock(&registry_lock);
  if (!last)
    return;
  if (!file->forked) {
    pthread_mutex_lock(&file->lock);
    flush_locked(file);
    pthread_mutex_unlock(&file->lock);
  }
  free_file(file);
}
