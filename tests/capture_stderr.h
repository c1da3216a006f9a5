/* capture_stderr.h: stderr captured into a file while a test case runs, for the tests that
 * check what gpumem reports there (debug level 3's reports, from C and from the GPU test
 * with kernels). What was captured is echoed, indented, to stdout, so that the test's log
 * shows it too. */
#ifndef GPUMEM_TESTS_CAPTURE_STDERR_H
#define GPUMEM_TESTS_CAPTURE_STDERR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE *captured;
static int saved_stderr = -1;
static char captured_text[1 << 16];

static inline void capture_fail(const char *what) {
  perror(what);
  exit(1);
}

static inline void capture_begin(void) {
  fflush(stderr);
  captured = tmpfile();
  if (!captured)
    capture_fail("capture_begin: tmpfile");
  saved_stderr = dup(STDERR_FILENO);
  if (saved_stderr < 0 || dup2(fileno(captured), STDERR_FILENO) < 0)
    capture_fail("capture_begin: dup");
}

/* Restores stderr and returns what was written to it; safe to call when nothing is being
 * captured (a test's exit hook does, so that a failed check's message is still seen). */
static inline const char *capture_end(void) {
  if (saved_stderr < 0)
    return captured_text;
  fflush(stderr);
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  saved_stderr = -1;
  rewind(captured);
  size_t length = fread(captured_text, 1, sizeof captured_text - 1, captured);
  captured_text[length] = '\0';
  fclose(captured);
  for (const char *line = captured_text; *line;) {
    const char *end = strchr(line, '\n');
    int n = end ? (int)(end - line) : (int)strlen(line);
    printf("    | %.*s\n", n, line);
    line += n + (end != NULL);
  }
  return captured_text;
}

#endif /* GPUMEM_TESTS_CAPTURE_STDERR_H */
