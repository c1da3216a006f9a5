/* replay.c: runs a fuzz target over files without libFuzzer: each argument is a file (its
 * bytes are one input) or a folder (each file in it is one). This is how CTest replays the
 * seed corpora and the inputs that once found a bug, with any compiler; libFuzzer builds
 * (scripts/fuzz.sh) link the targets with libFuzzer's own main instead. */
#include "fuzz.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

static int replay_file(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) {
    perror(path);
    return 1;
  }
  size_t capacity = 1 << 16, size = 0;
  uint8_t *data = malloc(capacity);
  size_t got;
  while (data && (got = fread(data + size, 1, capacity - size, file)) > 0) {
    size += got;
    if (size == capacity) {
      uint8_t *grown = realloc(data, capacity *= 2);
      if (!grown)
        free(data);
      data = grown;
    }
  }
  fclose(file);
  if (!data) {
    fprintf(stderr, "%s: no host memory\n", path);
    return 1;
  }
  printf("%s (%zu bytes)\n", path, size);
  LLVMFuzzerTestOneInput(data, size);
  free(data);
  return 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each regular file of the folder, in name order (the same order on every machine). */
static int replay_folder(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) {
    perror(path);
    return 1;
  }
  char **names = NULL;
  size_t count = 0;
  int failures = 0;
  for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
    if (entry->d_name[0] == '.')
      continue;
    char **grown = realloc(names, (count + 1) * sizeof *names);
    size_t length = strlen(path) + strlen(entry->d_name) + 2;
    if (grown)
      names = grown;
    if (!grown || !(names[count] = malloc(length))) {
      fprintf(stderr, "%s: out of host memory listing the corpus\n", path);
      failures++;
      break;
    }
    snprintf(names[count++], length, "%s/%s", path, entry->d_name);
  }
  closedir(dir);
  if (count == 0) {
    fprintf(stderr, "%s: an empty corpus replays nothing\n", path);
    failures++;
  }
  if (count > 0)
    qsort(names, count, sizeof *names, compare_names);
  for (size_t i = 0; i < count; i++) {
    failures += replay_file(names[i]);
    free(names[i]);
  }
  free(names);
  return failures;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|FOLDER...\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (int i = 1; i < argc; i++) {
    struct stat info;
    if (stat(argv[i], &info) != 0) {
      perror(argv[i]);
      failures++;
    } else {
      failures += S_ISDIR(info.st_mode) ? replay_folder(argv[i]) : replay_file(argv[i]);
    }
  }
  printf("%s\n", failures ? "some inputs could not be read" : "every input replayed");
  return failures ? 1 : 0;
}
