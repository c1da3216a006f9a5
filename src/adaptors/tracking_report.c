/* tracking_report.c: the text the tracking adaptor writes: its list of outstanding
 * allocations and the call stacks in its reports.
 *
 * Stacks are kept as raw return addresses (capture must cost little: glibc's backtrace()),
 * and named only here. A frame's name comes from the dynamic symbol table (dladdr1), which
 * holds a library's exported functions and, in a program linked with -rdynamic, the
 * program's non-static ones. A frame of a function it does not name is written as its
 * module and the offset in it, which `addr2line -f -e MODULE OFFSET` turns into a function
 * and a line: the nearest exported symbol below such a frame would name the wrong function,
 * so a symbol is used only when the address lies inside it. */
#include "adaptors/tracking.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* One frame: "name+0x1c (module)", or "module+0x2f10", or the bare address. */
static void append_frame(gpumem__text *text, void *address) {
  Dl_info info;
  const ElfW(Sym) *symbol = NULL;
  if (!dladdr1(address, &info, (void **)&symbol, RTLD_DL_SYMENT) || !info.dli_fname) {
    gpumem__text_printf(text, "%p", address);
    return;
  }
  uintptr_t at = (uintptr_t)address;
  if (info.dli_sname && info.dli_saddr && symbol &&
      at - (uintptr_t)info.dli_saddr < (uintptr_t)symbol->st_size) {
    gpumem__text_printf(text, "%s+0x%" PRIxPTR " (%s)", info.dli_sname,
                        at - (uintptr_t)info.dli_saddr, base_name(info.dli_fname));
    return;
  }
  gpumem__text_printf(text, "%s+0x%" PRIxPTR, base_name(info.dli_fname),
                      at - (uintptr_t)info.dli_fbase);
}

void gpumem__tracking_append_stack(gpumem__text *text, const gpumem__tracking_stack *stack,
                                   const char *indent) {
  if (stack->depth == 0)
    gpumem__text_printf(text, "%s(no frames)\n", indent);
  for (int i = 0; i < stack->depth; i++) {
    gpumem__text_printf(text, "%s#%d in ", indent, i);
    append_frame(text, stack->frames[i]);
    gpumem__text_printf(text, "\n");
  }
}

/* A line per allocation, "0x7f..: 1000 B, stream 0x0, at +1.250 s", as RMM's list starts
 * each with "POINTER: SIZE B"; with a stack, " : callstack:", its frames and an empty line
 * after them. */
void gpumem__tracking_append_entries(gpumem__text *text, const gpumem__tracking_entry *entries,
                                     size_t count) {
  for (size_t i = 0; i < count; i++) {
    const gpumem__tracking_entry *e = &entries[i];
    gpumem__text_printf(
        text, "0x%" PRIxPTR ": %zu B, stream 0x%" PRIxPTR ", at +%" PRIu64 ".%03" PRIu64 " s",
        e->ptr, e->bytes, (uintptr_t)e->stream, e->time_ns / 1000000000u,
        e->time_ns / 1000000u % 1000u);
    if (e->stack) {
      gpumem__text_printf(text, " : callstack:\n");
      gpumem__tracking_append_stack(text, e->stack, "");
    }
    gpumem__text_printf(text, "\n");
  }
}
