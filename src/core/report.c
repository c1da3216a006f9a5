/* report.c: the text report of a resource and the verdict on a request: why an allocation
 * failed for lack of memory, or what would stop one (gpumem_resource_report, and the end of
 * every out-of-memory message of the front end).
 *
 * The verdict follows the request down the tree. On the failure path it starts from what
 * the resource that refused it first said (the thread's out-of-memory note, set where a
 * refusal starts: a limit adaptor, a pool at its maximum, a base resource the device
 * refused, a host allocation that failed) and looks along the chain from the top to that
 * resource for a suballocator that had enough free bytes but no block large enough: then
 * the failure is fragmentation, and the refusal below is why it could not grow. Without a
 * note (on demand, or a note of a resource outside this tree) it judges from the figures
 * alone: down the upstream chain, a limit the request would pass, a suballocator with a
 * block that fits (nothing stops it) or without one (fragmented if it has the bytes; then
 * whether it may grow past its maximum), and at the bottom the device's free memory. A
 * figure an adaptor only passes on from its upstream (a pass-through adaptor's free memory,
 * a limit with the same value as its upstream's) is judged at the upstream, which owns it. */
#include "core/report.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Lines
 * ------------------------------------------------------------------------------------- */

/* Short figures ("1.5 MiB") for lines that carry many (the exact ones are in the JSON
 * dump). */
#define B(value) gpumem__format_bytes_short((value), (char[32]){0}, 32)

static const char *kind_of(const gpumem__report_walk *walk, int i) {
  return walk->nodes[i].mr->ops->kind;
}

static uint64_t fact(const gpumem__report_walk *walk, int i, int f) {
  return walk->nodes[i].facts[f];
}

static bool has(const gpumem__report_walk *walk, int i, int f) {
  return gpumem__report_has(&walk->nodes[i], f);
}

/* Writes ", " between the figures of a line. */
static void separate(gpumem__text *text, bool *first) {
  if (!*first)
    gpumem__text_printf(text, ", ");
  *first = false;
}

static void write_figures(gpumem__text *text, const gpumem__report_walk *walk, int i) {
  bool first = true;
  if (has(walk, i, GPUMEM__FACT_LIVE_BYTES)) {
    separate(text, &first);
    gpumem__text_printf(text, "live %s", B(fact(walk, i, GPUMEM__FACT_LIVE_BYTES)));
    if (has(walk, i, GPUMEM__FACT_LIVE_COUNT))
      gpumem__text_printf(text, " in %llu",
                          (unsigned long long)fact(walk, i, GPUMEM__FACT_LIVE_COUNT));
  }
  static const struct {
    int fact;
    const char *name;
  } plain[] = {
      {GPUMEM__FACT_RESERVED_BYTES, "reserved"},
      {GPUMEM__FACT_PEAK_LIVE_BYTES, "peak live"},
      {GPUMEM__FACT_PEAK_RESERVED_BYTES, "peak reserved"},
  };
  for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++)
    if (has(walk, i, plain[k].fact)) {
      separate(text, &first);
      gpumem__text_printf(text, "%s %s", plain[k].name, B(fact(walk, i, plain[k].fact)));
    }
  if (has(walk, i, GPUMEM__FACT_FREE_BYTES)) {
    separate(text, &first);
    gpumem__text_printf(text, "free %s", B(fact(walk, i, GPUMEM__FACT_FREE_BYTES)));
    if (has(walk, i, GPUMEM__FACT_FREE_BLOCKS))
      gpumem__text_printf(text, " in %llu block%s",
                          (unsigned long long)fact(walk, i, GPUMEM__FACT_FREE_BLOCKS),
                          fact(walk, i, GPUMEM__FACT_FREE_BLOCKS) == 1 ? "" : "s");
  }
  static const struct {
    int fact;
    const char *name;
  } limits[] = {
      {GPUMEM__FACT_LARGEST_FREE_BLOCK, "largest free block"},
      {GPUMEM__FACT_LIMIT_BYTES, "limit"},
      {GPUMEM__FACT_MAX_RESERVED_BYTES, "maximum"},
  };
  for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++)
    if (has(walk, i, limits[k].fact)) {
      separate(text, &first);
      gpumem__text_printf(text, "%s %s", limits[k].name, B(fact(walk, i, limits[k].fact)));
    }
  if (first)
    gpumem__text_printf(text, "no figures");
}

static void write_node(gpumem__text *text, const gpumem__report_walk *walk, int i) {
  const gpumem__report_node *node = &walk->nodes[i];
  bool has_children = (size_t)i + 1 < walk->count && walk->nodes[i + 1].parent == i;
  if (node->same_as < 0 && node->known == 0 && !has_children)
    return; /* nothing to say (an arena's inner source of superblocks); the JSON has it */
  gpumem__text_printf(text, "%*s", 2 + 2 * node->depth, "");
  if (strcmp(node->role, "bin") == 0)
    gpumem__text_printf(text, "bin %s: ", B(node->key));
  else if (strcmp(node->role, "stream") == 0)
    gpumem__text_printf(text, "stream 0x%llx: ", (unsigned long long)node->key);
  else if (strcmp(node->role, "upstream") != 0 && strcmp(node->role, "resource") != 0)
    gpumem__text_printf(text, "%s: ", node->role);
  if (node->same_as >= 0) {
    gpumem__text_printf(text, "%s (the same resource as above)\n", kind_of(walk, i));
    return;
  }
  gpumem__text_printf(text, "%s: ", kind_of(walk, i));
  write_figures(text, walk, i);
  gpumem__text_printf(text, "\n");
}

/* "device 0: 1 GiB free of 8 GiB; gpumem's resources in this process hold ..." */
static void write_device(gpumem__text *text, const gpumem__report_walk *walk) {
  gpumem__text_printf(text, "  device %d: ", walk->device);
  if (walk->device_known)
    gpumem__text_printf(text, "%s free of %s; ", B(walk->device_free), B(walk->device_total));
  else
    gpumem__text_printf(text, "free and total memory unknown (the driver would not say); ");
  gpumem__text_printf(text,
                      "gpumem's resources in this process hold %s of it, %s through this one\n",
                      B(walk->process_held), B(walk->tree_held));
}

/* ---------------------------------------------------------------------------------------
 * The verdict
 * ------------------------------------------------------------------------------------- */

typedef enum reason {
  REASON_NONE,        /* nothing found that stops it */
  REASON_FITS_BLOCK,  /* a suballocator has a free block for it */
  REASON_FITS_DEVICE, /* the device has the memory */
  REASON_LIMIT,       /* a limit adaptor's limit */
  REASON_MAXIMUM,     /* a suballocator's maximum size */
  REASON_RANGE,       /* another limit, said by the refusing resource (vmm's address range) */
  REASON_DEVICE,      /* the device is out of memory */
  REASON_OTHER        /* a resource gpumem cannot see into refused */
} reason;

typedef struct judgement {
  reason why;
  int node;         /* the resource the reason is about; -1: none */
  uint64_t asked;   /* what was asked of it */
  int fragmented;   /* a suballocator with enough free bytes and no block large enough; or -1 */
  const char *said; /* REASON_OTHER: the refusing resource's own words, or "" */
} judgement;

/* Node i only passes fact f on: its upstream answers the same (for the limits, which never
 * move: a limit adaptor's own limit differs from what its upstream answers). */
static bool forwarded(const gpumem__report_walk *walk, int i, int f) {
  int up = walk->nodes[i].upstream;
  return up >= 0 && has(walk, up, f) && fact(walk, up, f) == fact(walk, i, f);
}

/* Node i keeps free blocks of its own that any request it serves may use: it knows its free
 * bytes and largest free block, is no pass-through adaptor (which only passes its
 * upstream's on, read a moment apart), and does not route requests to bins by size (whose
 * free blocks serve only their own sizes). */
static bool suballocator(const gpumem__report_walk *walk, int i) {
  return has(walk, i, GPUMEM__FACT_FREE_BYTES) && has(walk, i, GPUMEM__FACT_LARGEST_FREE_BLOCK) &&
         !walk->nodes[i].has_bins && !walk->nodes[i].mr->passes_through;
}

/* The request's way down, top first: from the root to `to`, or (to < 0) along upstreams. */
static size_t path_of(const gpumem__report_walk *walk, int to, int *path, size_t capacity) {
  size_t n = 0;
  if (to < 0) {
    /* Upstream links follow the resources' own, which never loop. */
    for (int i = walk->count ? 0 : -1; i >= 0 && n < capacity; i = walk->nodes[i].upstream)
      path[n++] = i;
    return n;
  }
  for (int i = to; i >= 0 && n < capacity; i = walk->nodes[i].parent)
    path[n++] = i;
  for (size_t a = 0, b = n - 1; a < b; a++, b--) {
    int swap = path[a];
    path[a] = path[b];
    path[b] = swap;
  }
  return n;
}

/* Looks along the path for what stops a request of `need` bytes; `cause` >= 0 is the node
 * whose refusal is known (then only fragmentation is looked for on the way to it). */
static judgement look_along(const gpumem__report_walk *walk, const int *path, size_t n,
                            uint64_t need, int cause) {
  judgement j = {.why = REASON_NONE, .node = -1, .asked = need, .fragmented = -1};
  bool known = cause >= 0;
  for (size_t k = 0; k < n; k++) {
    int i = path[k];
    if (!known && has(walk, i, GPUMEM__FACT_LIMIT_BYTES) &&
        !forwarded(walk, i, GPUMEM__FACT_LIMIT_BYTES) && has(walk, i, GPUMEM__FACT_LIVE_BYTES) &&
        fact(walk, i, GPUMEM__FACT_LIVE_BYTES) + need > fact(walk, i, GPUMEM__FACT_LIMIT_BYTES))
      return (judgement){REASON_LIMIT, i, need, j.fragmented, NULL};
    if (suballocator(walk, i)) {
      uint64_t largest = fact(walk, i, GPUMEM__FACT_LARGEST_FREE_BLOCK);
      if (!known && largest >= need)
        return (judgement){REASON_FITS_BLOCK, i, need, -1, NULL};
      if (largest < need && fact(walk, i, GPUMEM__FACT_FREE_BYTES) >= need && j.fragmented < 0)
        j.fragmented = i;
      if (!known && has(walk, i, GPUMEM__FACT_MAX_RESERVED_BYTES) &&
          !forwarded(walk, i, GPUMEM__FACT_MAX_RESERVED_BYTES) &&
          fact(walk, i, GPUMEM__FACT_RESERVED_BYTES) + need >
              fact(walk, i, GPUMEM__FACT_MAX_RESERVED_BYTES))
        return (judgement){REASON_MAXIMUM, i, need, j.fragmented, NULL};
    }
    if (i == cause)
      break;
  }
  if (known || n == 0)
    return j;
  int bottom = path[n - 1];
  j.node = bottom;
  if (walk->nodes[bottom].mr->caps.memory != GPUMEM_MEMORY_DEVICE || !walk->device_known)
    j.why = REASON_NONE;
  else
    j.why = walk->device_free < need ? REASON_DEVICE : REASON_FITS_DEVICE;
  return j;
}

/* The first node of resource mr (not a repeat), or -1. */
static int node_of(const gpumem__report_walk *walk, const gpumem_resource *mr) {
  for (size_t i = 0; i < walk->count; i++)
    if (walk->nodes[i].mr == mr && walk->nodes[i].same_as < 0)
      return (int)i;
  return -1;
}

static void write_asked(gpumem__text *text, bool noted, uint64_t asked) {
  if (noted)
    gpumem__text_printf(text, "%s more was asked of it", B(asked));
  else
    gpumem__text_printf(text, "the request needs %s more", B(asked));
}

/* The sentence of a reason that stops the request, after "verdict: WORD: " or "it could not
 * grow: ". */
static void write_reason(gpumem__text *text, const gpumem__report_walk *walk, const judgement *j,
                         bool noted) {
  int i = j->node;
  switch (j->why) {
  case REASON_LIMIT:
    gpumem__text_printf(text, "%s allows %s, %s is allocated through it, and ", kind_of(walk, i),
                        B(fact(walk, i, GPUMEM__FACT_LIMIT_BYTES)),
                        B(fact(walk, i, GPUMEM__FACT_LIVE_BYTES)));
    write_asked(text, noted, j->asked);
    break;
  case REASON_MAXIMUM:
    gpumem__text_printf(text, "%s may hold at most %s from its upstream and holds %s, and ",
                        kind_of(walk, i), B(fact(walk, i, GPUMEM__FACT_MAX_RESERVED_BYTES)),
                        B(fact(walk, i, GPUMEM__FACT_RESERVED_BYTES)));
    write_asked(text, noted, j->asked);
    break;
  case REASON_RANGE:
    gpumem__text_printf(text, "%s refused %s: its own limit (the first line says which) is reached",
                        kind_of(walk, i), B(j->asked));
    break;
  case REASON_DEVICE:
    if (noted)
      gpumem__text_printf(text, "device %d refused %s to %s", walk->device, B(j->asked),
                          kind_of(walk, i));
    else
      gpumem__text_printf(text, "device %d has less free memory than the %s the request needs",
                          walk->device, B(j->asked));
    if (walk->device_known)
      gpumem__text_printf(text, "; it has %s free of %s", B(walk->device_free),
                          B(walk->device_total));
    gpumem__text_printf(text,
                        ", and gpumem's resources in this process hold %s of it (%s through "
                        "this one)",
                        B(walk->process_held), B(walk->tree_held));
    break;
  case REASON_OTHER:
    gpumem__text_printf(text, "%s said it has no memory for %s", kind_of(walk, i), B(j->asked));
    if (j->said && j->said[0])
      gpumem__text_printf(text, ": \"%s\"", j->said);
    else
      gpumem__text_printf(text, " and gave no reason");
    gpumem__text_printf(text, " (gpumem cannot see into it)");
    break;
  case REASON_FITS_BLOCK:
    gpumem__text_printf(text, "%s has a free block of %s for the %s the request needs",
                        kind_of(walk, i), B(fact(walk, i, GPUMEM__FACT_LARGEST_FREE_BLOCK)),
                        B(j->asked));
    break;
  case REASON_FITS_DEVICE:
    gpumem__text_printf(text, "device %d has %s free for the %s the request needs", walk->device,
                        B(walk->device_free), B(j->asked));
    break;
  case REASON_NONE:
    gpumem__text_printf(text, "nothing in the figures stops a request of %s", B(j->asked));
    break;
  }
}

static bool stops(reason why) {
  return why == REASON_LIMIT || why == REASON_MAXIMUM || why == REASON_RANGE ||
         why == REASON_DEVICE || why == REASON_OTHER;
}

/* The causes that settle the verdict whatever the figures say. */
static bool write_settled(gpumem__text *text, const gpumem__report_walk *walk,
                          const gpumem__oom_note *note, int cause) {
  const char *kind = kind_of(walk, cause);
  switch (note->cause) {
  case GPUMEM__OOM_HOST:
    gpumem__text_printf(text,
                        "verdict: host_failure: %s could not get the host memory it "
                        "needed while serving %s (the first line says what for)\n",
                        kind, B(note->bytes));
    return true;
  case GPUMEM__OOM_TOO_LARGE:
    gpumem__text_printf(text,
                        "verdict: too_large: %s can never serve %s (the first line says "
                        "why)\n",
                        kind, B(note->bytes));
    return true;
  case GPUMEM__OOM_INJECTED:
    gpumem__text_printf(text,
                        "verdict: injected: %s failed the request on purpose (fault "
                        "injection, for tests)\n",
                        kind);
    return true;
  default:
    return false;
  }
}

static void write_verdict(gpumem__text *text, const gpumem__report_walk *walk, uint64_t bytes,
                          size_t alignment, const gpumem__oom_note *note) {
  if (bytes == 0) {
    gpumem__text_printf(text, "verdict: none: no request to judge\n");
    return;
  }
  uint64_t need =
      gpumem__align_up(bytes, GPUMEM_DEFAULT_ALIGNMENT) + (alignment - GPUMEM_DEFAULT_ALIGNMENT);
  int cause = note && note->cause != GPUMEM__OOM_NONE ? node_of(walk, note->mr) : -1;
  if (cause >= 0 && write_settled(text, walk, note, cause))
    return;
  int path[128];
  size_t n = path_of(walk, cause, path, sizeof path / sizeof path[0]);
  judgement j = look_along(walk, path, n, need, cause);
  if (cause >= 0) {
    j.node = cause;
    j.asked = note->bytes;
    const gpumem__report_node *c = &walk->nodes[cause];
    if (note->cause == GPUMEM__OOM_DEVICE)
      j.why = REASON_DEVICE;
    else if (note->cause == GPUMEM__OOM_OTHER) {
      j.why = REASON_OTHER;
      j.said = note->said;
    } else if (gpumem__report_has(c, GPUMEM__FACT_LIMIT_BYTES))
      j.why = REASON_LIMIT;
    else if (gpumem__report_has(c, GPUMEM__FACT_MAX_RESERVED_BYTES))
      j.why = REASON_MAXIMUM;
    else
      j.why = REASON_RANGE;
  }
  bool noted = cause >= 0;
  if (j.fragmented >= 0 && stops(j.why)) {
    int f = j.fragmented;
    gpumem__text_printf(text, "verdict: fragmentation: %s holds %s free", kind_of(walk, f),
                        B(fact(walk, f, GPUMEM__FACT_FREE_BYTES)));
    if (has(walk, f, GPUMEM__FACT_FREE_BLOCKS))
      gpumem__text_printf(text, " in %llu block%s",
                          (unsigned long long)fact(walk, f, GPUMEM__FACT_FREE_BLOCKS),
                          fact(walk, f, GPUMEM__FACT_FREE_BLOCKS) == 1 ? "" : "s");
    gpumem__text_printf(text,
                        ", but its largest free block is %s, less than the %s needed; it "
                        "could not grow: ",
                        B(fact(walk, f, GPUMEM__FACT_LARGEST_FREE_BLOCK)), B(need));
  } else if (j.why == REASON_LIMIT || j.why == REASON_MAXIMUM || j.why == REASON_RANGE) {
    gpumem__text_printf(text, "verdict: limit_reached: ");
  } else if (j.why == REASON_DEVICE) {
    gpumem__text_printf(text, "verdict: device_full: ");
  } else if (j.why == REASON_OTHER) {
    gpumem__text_printf(text, "verdict: unexplained: ");
  } else if (note) { /* failed, yet the figures read since show room */
    gpumem__text_printf(text, "verdict: unexplained: the figures read after the failure show "
                              "room (memory freed since, or held for another stream's pending "
                              "work?): ");
  } else {
    gpumem__text_printf(text, "verdict: none: ");
  }
  write_reason(text, walk, &j, noted);
  gpumem__text_printf(text, "\n");
}

/* ---------------------------------------------------------------------------------------
 * The report
 * ------------------------------------------------------------------------------------- */

static void write_report(gpumem__text *text, const gpumem_resource *mr, uint64_t bytes,
                         size_t alignment, const gpumem__oom_note *note) {
  gpumem__report_walk walk;
  gpumem__report_read(mr, &walk);
  for (size_t i = 0; i < walk.count; i++)
    write_node(text, &walk, (int)i);
  if (walk.cut)
    gpumem__text_printf(text, "  (more resources not shown: the tree is larger or deeper than a "
                              "report holds)\n");
  if (walk.failed)
    gpumem__text_printf(text, "  (more resources not shown: the host ran out of memory)\n");
  write_device(text, &walk);
  write_verdict(text, &walk, bytes, alignment, note);
  gpumem__report_walk_free(&walk);
}

gpumem_status gpumem_resource_report(const gpumem_resource *mr, size_t bytes, size_t alignment,
                                     char *buf, size_t size, size_t *needed) {
  static const char who[] = "gpumem_resource_report";
  if (!mr || (!buf && size > 0))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s", who,
                        mr ? "buf is NULL with a size" : "the resource is NULL");
  if (alignment != 0 && !gpumem__is_pow2(alignment))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: alignment %zu is not a power of two", who,
                        alignment);
  alignment = alignment < GPUMEM_DEFAULT_ALIGNMENT ? GPUMEM_DEFAULT_ALIGNMENT : alignment;
  if (bytes > SIZE_MAX - alignment)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "%s: %zu bytes with alignment %zu overflows the address space", who, bytes,
                        alignment);
  gpumem__text text = {0};
  write_report(&text, mr, bytes, alignment, NULL);
  gpumem_status status = gpumem__text_copy_out(who, &text, buf, size, needed);
  gpumem__text_free(&text);
  return status;
}

/* No host memory for the report: the verdict alone, from the note when it is of a resource
 * of mr's chain of upstreams (no walk needed to tell), after as much of the message as the
 * fixed buffer holds with it. */
static void write_verdict_alone(const gpumem_resource *mr, const gpumem__oom_note *note) {
  static const char *const words[] = {
      [GPUMEM__OOM_NONE] = "unexplained",    [GPUMEM__OOM_LIMIT] = "limit_reached",
      [GPUMEM__OOM_DEVICE] = "device_full",  [GPUMEM__OOM_HOST] = "host_failure",
      [GPUMEM__OOM_TOO_LARGE] = "too_large", [GPUMEM__OOM_INJECTED] = "injected",
      [GPUMEM__OOM_OTHER] = "unexplained",
  };
  const gpumem_resource *at = mr;
  while (at && at != note->mr)
    at = at->upstream;
  const char *word = at ? words[note->cause] : "unexplained";
  char verdict[200], line[1000];
  int length = at ? snprintf(verdict, sizeof verdict,
                             "\nverdict: %s: as %s said when it refused (the host had no memory "
                             "left for the report's figures)",
                             word, at->ops->kind)
                  : snprintf(verdict, sizeof verdict,
                             "\nverdict: unexplained: no cause known (the host had no memory "
                             "left for the report's figures)");
  snprintf(line, sizeof line, "%.*s%s", (int)(sizeof line - 1 - (size_t)length),
           gpumem_last_error_message(), verdict);
  gpumem__set_long_message(line, strlen(line));
}

gpumem_status gpumem__report_out_of_memory(const gpumem_resource *mr, size_t bytes,
                                           size_t alignment) {
  gpumem__oom_note note = gpumem__last_oom();
  /* The words too: a user resource's query, run by the walk, may note another refusal. */
  char said[GPUMEM__OOM_SAID_SIZE];
  if (note.said) {
    snprintf(said, sizeof said, "%s", note.said);
    note.said = said;
  }
  gpumem__text text = {0};
  /* The message first: a user resource's query, read by the walk, may set another. */
  gpumem__text_printf(&text, "%s\n", gpumem_last_error_message());
  write_report(&text, mr, bytes, alignment, &note);
  /* The report's last newline is a file's; a message ends with its verdict. */
  if (text.failed || !gpumem__set_long_message(text.data, text.length - 1))
    write_verdict_alone(mr, &note);
  gpumem__text_free(&text);
  return GPUMEM_ERR_OUT_OF_MEMORY;
}
