/* log_death.c: what a log keeps when its process ends badly, each case in a child process.
 *
 * A child logs through an adaptor and then ends: exit without releasing it (the file is
 * exact), abort, SIGKILL (the out-of-memory killer's signal: nothing can run), and an
 * out-of-memory failure followed by an abort, as a program that dies of one. The parent
 * reads the file: every event up to the end is there, in RMM's format; after exit or a
 * failed allocation the file is exact, after abort or SIGKILL only zeros follow the last
 * event. A full disk (a file size limit, RLIMIT_FSIZE) mid-run is reported once on stderr
 * and the allocations go on; at creation it fails the creation, naming the file and why;
 * the end of the address space reserved for the file is handled the same way. A child of
 * fork neither writes nor cuts its parent's file, at its exit either. A pipe is written
 * through a buffer drained at flush and exit; a reader gone fails a flush (EPIPE) without
 * SIGPIPE killing the process. /dev/null takes a log. */
#include "check.h"
#include "log_check.h"

#include "adaptors/log_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Runs `body` in a child whose stderr goes to `stderr_path` (when not NULL); returns how
 * the child ended (waitpid's status). */
static int in_child(void (*body)(void), const char *stderr_path) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    if (stderr_path) {
      int fd = open(stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(90);
    }
    body();
    _exit(91); /* bodies end the process themselves */
  }
  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

enum { events = 3000 };

/* `events` allocations, the first half freed again: events + events / 2 lines. */
static void log_some(gpumem_resource *mr) {
  static void *ptrs[events];
  for (int i = 0; i < events; i++)
    CHECK_OK(gpumem_allocate(mr, 1000 + (size_t)i, NULL, &ptrs[i]));
  for (int i = 0; i < events / 2; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], 1000 + (size_t)i, NULL));
}

static void check_all_there(const char *path, bool exact) {
  log_read r = log_read_file(path);
  CHECK_EQ(r.count, events + events / 2);
  for (int i = 0; i < events; i++)
    CHECK_U64_EQ(r.lines[i].size, 1000 + (size_t)i);
  log_check_pairs(&r);
  if (exact)
    CHECK_EQ(r.zero_bytes, 0);
  log_read_free(&r);
}

/* ---- endings ---- */

/* A log a child leaves alive when it ends: reachable, so that LeakSanitizer (the ASan build)
 * does not count it as lost. */
static gpumem_resource *kept;

static void exit_without_release(void) {
  kept = build_log("cuda", in_dir("exit.csv"));
  log_some(kept);
  exit(0);
}

static void abort_after(void) {
  signal(SIGABRT, SIG_DFL);
  log_some(build_log("cuda", in_dir("abort.csv")));
  abort();
}

static void killed_after(void) {
  log_some(build_log("cuda", in_dir("kill.csv")));
  kill(getpid(), SIGKILL);
}

static void dies_of_out_of_memory(void) {
  gpumem_resource *mr = build_log("limit(cuda, max=1MiB)", in_dir("oom.csv"));
  for (;;) {
    void *ptr;
    if (gpumem_allocate(mr, 100 * KiB, NULL, &ptr) != GPUMEM_OK)
      abort(); /* as a program that does not catch it */
  }
}

static void test_endings(void) {
  int status = in_child(exit_without_release, NULL);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  check_all_there(in_dir("exit.csv"), true);
  status = in_child(abort_after, NULL);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  check_all_there(in_dir("abort.csv"), false);
  status = in_child(killed_after, NULL);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  check_all_there(in_dir("kill.csv"), false);
  status = in_child(dies_of_out_of_memory, NULL);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  log_read r = log_read_file(in_dir("oom.csv"));
  CHECK_EQ(r.zero_bytes, 0);
  CHECK_EQ(r.count, 11); /* ten of 100 KiB fit under 1 MiB */
  CHECK_EQ(log_count(&r, LOG_ALLOCATE), 10);
  CHECK_EQ(r.lines[10].action, LOG_FAILURE);
  CHECK_U64_EQ(r.lines[10].size, 100 * KiB);
  log_read_free(&r);
  printf("endings: exit, abort, SIGKILL and an out-of-memory death keep every event\n");
}

/* ---- a disk that fills up ---- */

static size_t count_in_file(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  char line[1024];
  size_t n = 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

static void limit_file_size(rlim_t bytes) {
  signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead of the signal killing it */
  struct rlimit limit = {bytes, bytes};
  CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
}

/* 60000 events, 3 MiB or so, against a file that may not grow past 1.5 MiB. */
static void fill_the_disk(void) {
  limit_file_size(3 * MiB / 2);
  gpumem_resource *mr = build_log("cuda", in_dir("full.csv"));
  for (int i = 0; i < 30000; i++) {
    void *ptr;
    CHECK_OK(gpumem_allocate(mr, 4096, NULL, &ptr)); /* the allocations go on */
    CHECK_OK(gpumem_deallocate(mr, ptr, 4096, NULL));
  }
  CHECK_FAILS_WITH(gpumem_log_flush(mr), GPUMEM_ERR_IO, "File too large");
  CHECK_CONTAINS(gpumem_last_error_message(), "events were dropped");
  CHECK_OK(gpumem_resource_release(mr));
  exit(0);
}

static void full_at_creation(void) {
  limit_file_size(100 * KiB);
  gpumem_resource *up = check_build("cuda"), *out = NULL;
  gpumem_log_options opts = {.file_name = in_dir("full-at-start.csv")};
  CHECK_FAILS_WITH(gpumem_log_create(up, &opts, &out), GPUMEM_ERR_IO, "File too large");
  CHECK_CONTAINS(gpumem_last_error_message(), opts.file_name);
  CHECK(out == NULL);
  CHECK_OK(gpumem_resource_release(up));
  exit(0);
}

/* The address space reserved for a file ends before the disk does. */
static void reach_the_mapping_end(void) {
  gpumem__log_map_limit = 2 * MiB;
  gpumem_resource *mr = build_log("cuda", in_dir("mapped.csv"));
  for (int i = 0; i < 30000; i++) {
    void *ptr;
    CHECK_OK(gpumem_allocate(mr, 4096, NULL, &ptr));
    CHECK_OK(gpumem_deallocate(mr, ptr, 4096, NULL));
  }
  CHECK_FAILS_WITH(gpumem_log_flush(mr), GPUMEM_ERR_IO, "dropped");
  CHECK_OK(gpumem_resource_release(mr));
  exit(0);
}

static void check_stopped_once(const char *log, const char *stderr_path, size_t most_bytes) {
  CHECK_EQ(count_in_file(stderr_path, "the log stops here"), 1);
  CHECK_EQ(count_in_file(stderr_path, log), 1);
  log_read r = log_read_file(log);
  CHECK(r.file_bytes <= most_bytes);
  CHECK(r.count > 10000); /* what fitted is there, whole lines */
  log_check_pairs(&r);
  log_read_free(&r);
}

static void test_full_disk(void) {
  int status = in_child(fill_the_disk, in_dir("full.stderr"));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  check_stopped_once(in_dir("full.csv"), in_dir("full.stderr"), 3 * MiB / 2);
  status = in_child(full_at_creation, NULL);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = in_child(reach_the_mapping_end, in_dir("mapped.stderr"));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  check_stopped_once(in_dir("mapped.csv"), in_dir("mapped.stderr"), 2 * MiB);
  CHECK_EQ(count_in_file(in_dir("mapped.stderr"), "address space"), 1);
  printf("full disk: reported once, allocations go on; at creation, the creation fails\n");
}

/* ---- fork ---- */

static gpumem_resource *forked_log;

static void child_of_fork(void) {
  void *ptr;
  CHECK_OK(gpumem_allocate(forked_log, 999, NULL, &ptr)); /* not logged */
  CHECK_OK(gpumem_deallocate(forked_log, ptr, 999, NULL));
  CHECK_FAILS_WITH(gpumem_log_flush(forked_log), GPUMEM_ERR_IO, "fork");
  exit(0); /* exit's flush leaves the parent's file alone */
}

static void test_fork(void) {
  const char *path = in_dir("fork.csv");
  forked_log = build_log("cuda", path);
  void *a, *b;
  CHECK_OK(gpumem_allocate(forked_log, 111, NULL, &a));
  int status = in_child(child_of_fork, NULL);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(gpumem_allocate(forked_log, 222, NULL, &b));
  CHECK_OK(gpumem_deallocate(forked_log, a, 111, NULL));
  CHECK_OK(gpumem_deallocate(forked_log, b, 222, NULL));
  CHECK_OK(gpumem_resource_release(forked_log));
  log_read r = log_read_file(path);
  CHECK_EQ(r.zero_bytes, 0);
  CHECK_EQ(r.count, 4);
  CHECK_U64_EQ(r.lines[0].size, 111);
  CHECK_U64_EQ(r.lines[1].size, 222);
  log_read_free(&r);
  printf("fork: the child neither writes nor cuts its parent's file\n");
}

/* ---- pipes and devices ---- */

static size_t read_all(int fd, char *buf, size_t size) {
  size_t got = 0;
  for (ssize_t n; got < size - 1 && (n = read(fd, buf + got, size - 1 - got)) > 0;)
    got += (size_t)n;
  buf[got] = '\0';
  return got;
}

static int pipe_to_parent[2];

static void log_to_pipe_and_exit(void) {
  close(pipe_to_parent[0]);
  char name[64];
  snprintf(name, sizeof name, "/proc/self/fd/%d", pipe_to_parent[1]);
  kept = build_log("cuda", name);
  close(pipe_to_parent[1]); /* the log has its own */
  void *ptr;
  CHECK_OK(gpumem_allocate(kept, 4242, NULL, &ptr));
  exit(0); /* the buffer is written out at exit */
}

static void test_pipes(void) {
  /* A child's log into a pipe, written out when it exits. */
  CHECK(pipe(pipe_to_parent) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    log_to_pipe_and_exit();
  close(pipe_to_parent[1]);
  static char text[1 << 16];
  read_all(pipe_to_parent[0], text, sizeof text);
  close(pipe_to_parent[0]);
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(strncmp(text, "Thread,Time,Action,Pointer,Size,Stream\n", 39) == 0);
  CHECK_CONTAINS(text, ",allocate,0x");
  CHECK_CONTAINS(text, ",4242,0\n");

  /* In this process: written at a flush; a reader gone fails the next one, once reported,
   * with SIGPIPE neither delivered nor left pending. */
  int fds[2];
  CHECK(pipe(fds) == 0);
  char name[64];
  snprintf(name, sizeof name, "/proc/self/fd/%d", fds[1]);
  gpumem_resource *mr = build_log("cuda", name);
  close(fds[1]);
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 5151, NULL, &ptr));
  CHECK_OK(gpumem_log_flush(mr));
  CHECK(fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0);
  read_all(fds[0], text, sizeof text);
  CHECK_CONTAINS(text, ",5151,0\n");
  close(fds[0]);
  CHECK_OK(gpumem_deallocate(mr, ptr, 5151, NULL));
  CHECK_FAILS_WITH(gpumem_log_flush(mr), GPUMEM_ERR_IO, "Broken pipe");
  sigset_t pending;
  CHECK(sigpending(&pending) == 0);
  CHECK(!sigismember(&pending, SIGPIPE));
  CHECK_OK(gpumem_allocate(mr, 10, NULL, &ptr)); /* allocations go on */
  CHECK_OK(gpumem_deallocate(mr, ptr, 10, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  mr = build_log("cuda", "/dev/null");
  CHECK_OK(gpumem_allocate(mr, 10, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 10, NULL));
  CHECK_OK(gpumem_log_flush(mr));
  CHECK_OK(gpumem_resource_release(mr));
  printf("pipes: written at flush and exit; a reader gone fails a flush, not the process\n");
}

static void remove_files(void) {
  static const char *const names[] = {"exit.csv",      "abort.csv",        "kill.csv", "oom.csv",
                                      "full.csv",      "full.stderr",      "fork.csv", "mapped.csv",
                                      "mapped.stderr", "full-at-start.csv"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    unlink(in_dir(names[i]));
  CHECK(rmdir(log_dir) == 0);
}

int main(void) {
  check_init_backend();
  if (!check_on_sim()) {
    printf("skipped: these tests run on the simulated device\n");
    return CHECK_SKIP_CODE;
  }
  snprintf(log_dir, sizeof log_dir, "/tmp/gpumem-log-death-XXXXXX");
  CHECK(mkdtemp(log_dir) != NULL);
  test_endings();
  test_full_disk();
  test_fork();
  test_pipes();
  remove_files();
  return 0;
}
