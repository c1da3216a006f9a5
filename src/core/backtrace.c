/* backtrace.c: call stacks, for debug level 3's reports (where a block was allocated and
 * where it was first freed) and the tracking adaptor's (where each outstanding allocation
 * was made).
 *
 * Capture keeps raw return addresses (glibc's backtrace(), a walk of the unwind tables, a
 * microsecond or so): a name is looked up only when a report is written. Names come from
 * the dynamic symbol table (dladdr1), which holds a library's exported functions and, in a
 * program linked with -rdynamic, the program's non-static ones. A frame of a function it
 * does not name is written as its module and the offset in it, which `addr2line -f -e
 * MODULE OFFSET` turns into a function and a line: the nearest exported symbol below such
 * a frame would name the wrong function, so a symbol is used only when the address lies
 * inside it. */
#include "core/internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <link.h>
#include <string.h>

/* Frames asked of backtrace() past the depth kept: gpumem's own, above `from`. */
#define OWN_FRAMES 8
#define MOST_FRAMES 256

GPUMEM_NOINLINE int gpumem__backtrace(void **frames, int depth, const void *from) {
  void *all[MOST_FRAMES + OWN_FRAMES];
  if (depth > MOST_FRAMES)
    depth = MOST_FRAMES;
  int found = backtrace(all, depth + OWN_FRAMES);
  /* The program's frames start at `from`, whatever gpumem's frames above it were (tail
   * calls and inlining change them from build to build); not found, after this one. */
  int skip = found > 0 ? 1 : 0;
  for (int i = 0; from && i < found; i++) {
    if (all[i] == from) {
      skip = i;
      break;
    }
  }
  int kept = found - skip < depth ? found - skip : depth;
  memcpy(frames, all + skip, (size_t)kept * sizeof all[0]);
  return kept;
}

void gpumem__stack_capture(gpumem__stack *stack, const void *from) {
  stack->depth = gpumem__backtrace(stack->frames, GPUMEM__STACK_DEPTH, from);
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

void gpumem__format_frame(void *address, bool module, char *buf, size_t size) {
  Dl_info info;
  const ElfW(Sym) *symbol = NULL;
  if (!dladdr1(address, &info, (void **)&symbol, RTLD_DL_SYMENT) || !info.dli_fname) {
    snprintf(buf, size, "%p", address);
    return;
  }
  uintptr_t at = (uintptr_t)address;
  if (info.dli_sname && info.dli_saddr && symbol &&
      at - (uintptr_t)info.dli_saddr < (uintptr_t)symbol->st_size) {
    if (module)
      snprintf(buf, size, "%s+0x%zx (%s)", info.dli_sname, (size_t)(at - (uintptr_t)info.dli_saddr),
               base_name(info.dli_fname));
    else
      snprintf(buf, size, "%s+0x%zx", info.dli_sname, (size_t)(at - (uintptr_t)info.dli_saddr));
    return;
  }
  snprintf(buf, size, "%s+0x%zx", base_name(info.dli_fname),
           (size_t)(at - (uintptr_t)info.dli_fbase));
}

const char *gpumem__stack_line(const gpumem__stack *stack, int frames, char *buf, size_t size) {
  if (size == 0)
    return buf;
  buf[0] = '\0';
  if (stack->depth == 0) {
    snprintf(buf, size, "(no stack)");
    return buf;
  }
  size_t used = 0;
  for (int i = 0; i < stack->depth && i < frames && used + 1 < size; i++) {
    char frame[256];
    gpumem__format_frame(stack->frames[i], false, frame, sizeof frame);
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? " < " : "", frame);
  }
  return buf;
}

void gpumem__stack_print(const gpumem__stack *stack, FILE *out, const char *indent) {
  if (stack->depth == 0)
    fprintf(out, "%s(no stack)\n", indent);
  for (int i = 0; i < stack->depth; i++) {
    char frame[512];
    gpumem__format_frame(stack->frames[i], true, frame, sizeof frame);
    fprintf(out, "%s#%d %s\n", indent, i, frame);
  }
}
