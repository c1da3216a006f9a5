/* report.h: what the two kinds of report share (report.c: the text report and the verdict
 * of an out-of-memory failure; report_json.c: the JSON dump of a composed resource): a
 * growing string, and the walk that reads a resource's tree and every node's figures.
 *
 * The walk reads each resource through its query operation, so it takes exactly the locks
 * the queries take, one resource at a time, and holds none while it moves on: a report may
 * run while other threads allocate, and sees each resource's figures of one moment (not
 * one moment for all of them). */
#ifndef GPUMEM_CORE_REPORT_H
#define GPUMEM_CORE_REPORT_H

#include "core/internal.h"

/* A string on the heap, grown as it is written. Once host memory runs out, `failed` is set
 * and later writes do nothing. */
typedef struct gpumem__text {
  char *data; /* NUL-terminated once anything was written */
  size_t length, capacity;
  bool failed;
} gpumem__text;

void gpumem__text_printf(gpumem__text *text, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
void gpumem__text_free(gpumem__text *text);

/* Copies a finished text out as the public buffer calls do: whole into buf with its NUL
 * (*needed, when not NULL, gets its size with the NUL); a buffer too small is
 * GPUMEM_ERR_INVALID_ARGUMENT with the size needed in *needed and the message, and buf
 * untouched; a text whose host memory ran out is GPUMEM_ERR_OUT_OF_MEMORY. */
gpumem_status gpumem__text_copy_out(const char *caller, const gpumem__text *text, char *buf,
                                    size_t size, size_t *needed);

/* The figures of a node, in the order of gpumem__report_fact_queries. */
enum {
  GPUMEM__FACT_LIVE_BYTES,
  GPUMEM__FACT_LIVE_COUNT,
  GPUMEM__FACT_RESERVED_BYTES,
  GPUMEM__FACT_PEAK_LIVE_BYTES,
  GPUMEM__FACT_PEAK_RESERVED_BYTES,
  GPUMEM__FACT_FREE_BYTES,
  GPUMEM__FACT_FREE_BLOCKS,
  GPUMEM__FACT_LARGEST_FREE_BLOCK,
  GPUMEM__FACT_LIMIT_BYTES,
  GPUMEM__FACT_MAX_RESERVED_BYTES,
  GPUMEM__FACT_COUNT
};

extern const gpumem_query gpumem__report_fact_queries[GPUMEM__FACT_COUNT];

typedef struct gpumem__report_node {
  const gpumem_resource *mr;
  int parent;       /* index of the node it hangs from; -1 for the root */
  int depth;        /* 0 for the root */
  int same_as;      /* a resource reached again: the index of its first node (no figures) */
  int upstream;     /* index of its upstream's node, -1 when none (or cut) */
  const char *role; /* "resource" (the root), "upstream", or a part's role */
  uint64_t key;     /* a part's key */
  bool has_bins;    /* it routes requests to bins by size */
  uint32_t known;   /* bit i: facts[i] is known */
  uint64_t facts[GPUMEM__FACT_COUNT];
} gpumem__report_node;

typedef struct gpumem__report_walk {
  gpumem__report_node *nodes; /* depth first, upstream before parts */
  size_t count, capacity;
  bool cut;          /* resources left out: too many, or too deep */
  bool failed;       /* host memory ran out: nodes are what was read before */
  int device;        /* the root's */
  bool device_known; /* the device's memory figures could be read */
  size_t device_free, device_total;
  uint64_t process_held; /* device memory gpumem's resources hold in this process */
  uint64_t tree_held;    /* ... of which the tree's resources that hold device memory */
} gpumem__report_walk;

static inline bool gpumem__report_has(const gpumem__report_node *node, int fact) {
  return (node->known >> fact) & 1u;
}

/* Reads mr's tree into *walk (free it with gpumem__report_walk_free, also after a failure:
 * walk->failed then says the host ran out of memory for it). */
void gpumem__report_read(const gpumem_resource *mr, gpumem__report_walk *walk);
void gpumem__report_walk_free(gpumem__report_walk *walk);

#endif /* GPUMEM_CORE_REPORT_H */
