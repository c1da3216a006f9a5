/* report_walk.c: what the reports stand on (report.h): the walk of a resource's tree, the
 * list of resources that hold device memory, and the growing string both reports write.
 *
 * The tree of a resource is its chain of upstreams plus what some resources hold inside
 * (their parts: a binning resource's bins, an arena's pools), which often draw from the
 * same upstream as their owner: a resource reached a second time becomes a node that names
 * the first, so that the walk ends and no figure is counted twice. Every figure comes from
 * the resource's own query operation, called directly so that an unknown fact sets no
 * message: the walk can run on the failure path of an allocation, whose message stands. */
#include "core/report.h"
#include "device/device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Past these the walk stops and says the report is cut: no real composition comes near. */
#define MAX_NODES 4096
#define MAX_DEPTH 64

const gpumem_query gpumem__report_fact_queries[GPUMEM__FACT_COUNT] = {
    GPUMEM_QUERY_LIVE_BYTES,         GPUMEM_QUERY_LIVE_COUNT,          GPUMEM_QUERY_RESERVED_BYTES,
    GPUMEM_QUERY_PEAK_LIVE_BYTES,    GPUMEM_QUERY_PEAK_RESERVED_BYTES, GPUMEM_QUERY_FREE_BYTES,
    GPUMEM_QUERY_FREE_BLOCKS,        GPUMEM_QUERY_LARGEST_FREE_BLOCK,  GPUMEM_QUERY_LIMIT_BYTES,
    GPUMEM_QUERY_MAX_RESERVED_BYTES,
};

/* ---------------------------------------------------------------------------------------
 * The growing string
 * ------------------------------------------------------------------------------------- */

void gpumem__text_printf(gpumem__text *text, const char *format, ...) {
  if (text->failed)
    return;
  for (;;) {
    size_t room = text->capacity - text->length;
    va_list args;
    va_start(args, format);
    int written = vsnprintf(text->data ? text->data + text->length : NULL, room, format, args);
    va_end(args);
    if (written < 0) {
      text->failed = true;
      return;
    }
    if ((size_t)written < room) {
      text->length += (size_t)written;
      return;
    }
    size_t capacity = text->capacity ? text->capacity : 256;
    while (capacity - text->length <= (size_t)written)
      capacity *= 2;
    char *grown = realloc(text->data, capacity);
    if (!grown) {
      text->failed = true;
      return;
    }
    text->data = grown;
    text->capacity = capacity;
  }
}

void gpumem__text_free(gpumem__text *text) {
  free(text->data);
  *text = (gpumem__text){0};
}

gpumem_status gpumem__text_copy_out(const char *caller, const gpumem__text *text, char *buf,
                                    size_t size, size_t *needed) {
  if (text->failed)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory to write it", caller);
  size_t whole = text->length + 1;
  if (needed)
    *needed = whole;
  if (!buf || size < whole)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "%s: it needs a buffer of %zu bytes (with its NUL); the buffer has %zu%s",
                        caller, whole, buf ? size : 0,
                        buf ? "" : " (none given: this call asks for the size)");
  memcpy(buf, text->data ? text->data : "", whole);
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * The resources that hold device memory
 * ------------------------------------------------------------------------------------- */

static pthread_mutex_t holders_lock = PTHREAD_MUTEX_INITIALIZER;
static gpumem__holder holders = {&holders, &holders, NULL};

void gpumem__holder_add(gpumem__holder *holder, const gpumem_resource *mr) {
  pthread_mutex_lock(&holders_lock);
  holder->mr = mr;
  holder->prev = holders.prev;
  holder->next = &holders;
  holders.prev->next = holder;
  holders.prev = holder;
  pthread_mutex_unlock(&holders_lock);
}

void gpumem__holder_remove(gpumem__holder *holder) {
  pthread_mutex_lock(&holders_lock);
  holder->prev->next = holder->next;
  holder->next->prev = holder->prev;
  holder->prev = holder->next = holder;
  pthread_mutex_unlock(&holders_lock);
}

/* Device memory held by gpumem's resources of `device`. Each is read under the list's
 * lock, which its destroy takes before freeing anything (gpumem__holder_remove). */
static uint64_t held_on_device(int device) {
  uint64_t total = 0, value;
  pthread_mutex_lock(&holders_lock);
  for (const gpumem__holder *h = holders.next; h != &holders; h = h->next) {
    const gpumem_resource *mr = h->mr;
    if (mr->device == device && mr->caps.memory == GPUMEM_MEMORY_DEVICE && mr->ops->query &&
        mr->ops->query(mr, GPUMEM_QUERY_RESERVED_BYTES, &value) == GPUMEM_OK)
      total += value;
  }
  pthread_mutex_unlock(&holders_lock);
  return total;
}

/* ---------------------------------------------------------------------------------------
 * Parts
 * ------------------------------------------------------------------------------------- */

gpumem__part *gpumem__parts_of(const gpumem_resource *mr, size_t *count, bool *complete) {
  *count = 0;
  *complete = true;
  if (mr->ops->version < 5 || !mr->ops->parts)
    return NULL;
  size_t capacity = 16;
  for (int tries = 0; tries < 8; tries++) {
    gpumem__part *parts = malloc(capacity * sizeof *parts);
    if (!parts)
      break;
    size_t n = mr->ops->parts(mr, parts, capacity);
    if (n <= capacity) {
      *count = n;
      return parts;
    }
    free(parts);
    capacity = n + 16; /* more may come meanwhile */
  }
  *complete = false;
  return NULL;
}

/* ---------------------------------------------------------------------------------------
 * The walk
 * ------------------------------------------------------------------------------------- */

static int add_node(gpumem__report_walk *walk, const gpumem_resource *mr, int parent, int depth,
                    const char *role, uint64_t key) {
  if (walk->count == walk->capacity) {
    size_t capacity = walk->capacity ? 2 * walk->capacity : 16;
    gpumem__report_node *grown = realloc(walk->nodes, capacity * sizeof *grown);
    if (!grown) {
      walk->failed = true;
      return -1;
    }
    walk->nodes = grown;
    walk->capacity = capacity;
  }
  int index = (int)walk->count++;
  gpumem__report_node *node = &walk->nodes[index];
  *node = (gpumem__report_node){.mr = mr,
                                .parent = parent,
                                .depth = depth,
                                .same_as = -1,
                                .upstream = -1,
                                .role = role,
                                .key = key};
  for (int i = 0; i < index; i++)
    if (walk->nodes[i].mr == mr && walk->nodes[i].same_as < 0) {
      node->same_as = i;
      break;
    }
  return index;
}

static void read_facts(gpumem__report_node *node) {
  const gpumem_resource *mr = node->mr;
  if (!mr->ops->query)
    return;
  for (int f = 0; f < GPUMEM__FACT_COUNT; f++) {
    uint64_t value;
    if (mr->ops->query(mr, gpumem__report_fact_queries[f], &value) == GPUMEM_OK) {
      node->facts[f] = value;
      node->known |= 1u << f;
    }
  }
}

static void visit(gpumem__report_walk *walk, const gpumem_resource *mr, int parent, int depth,
                  const char *role, uint64_t key) {
  if (walk->failed)
    return;
  if (walk->count >= MAX_NODES || depth > MAX_DEPTH) {
    walk->cut = true;
    return;
  }
  int index = add_node(walk, mr, parent, depth, role, key);
  if (index < 0 || walk->nodes[index].same_as >= 0)
    return;
  read_facts(&walk->nodes[index]);
  if (mr->upstream) {
    int upstream = (int)walk->count;
    visit(walk, mr->upstream, index, depth + 1, "upstream", 0);
    if (upstream < (int)walk->count) {
      int first = walk->nodes[upstream].same_as;
      walk->nodes[index].upstream = first >= 0 ? first : upstream;
    }
  }
  size_t count;
  bool complete;
  gpumem__part *parts = gpumem__parts_of(mr, &count, &complete);
  if (!complete)
    walk->failed = true;
  for (size_t i = 0; i < count; i++) {
    if (strcmp(parts[i].role, "bin") == 0)
      walk->nodes[index].has_bins = true;
    visit(walk, parts[i].resource, index, depth + 1, parts[i].role, parts[i].key);
  }
  free(parts);
}

void gpumem__report_read(const gpumem_resource *mr, gpumem__report_walk *walk) {
  *walk = (gpumem__report_walk){.device = mr->device};
  visit(walk, mr, -1, 0, "resource", 0);
  walk->device_known = mr->dev && mr->dev->mem_info(mr->device, &walk->device_free,
                                                    &walk->device_total) == GPUMEM_OK;
  walk->process_held = held_on_device(mr->device);
  /* What the tree holds of the device: its resources that hold device memory themselves,
   * the ones at the bottom (no upstream, no parts). */
  for (size_t i = 0; i < walk->count; i++) {
    const gpumem__report_node *node = &walk->nodes[i];
    bool has_parts = node->mr->ops->version >= 5 && node->mr->ops->parts;
    if (node->same_as < 0 && !node->mr->upstream && !has_parts &&
        node->mr->caps.memory == GPUMEM_MEMORY_DEVICE &&
        gpumem__report_has(node, GPUMEM__FACT_RESERVED_BYTES))
      walk->tree_held += node->facts[GPUMEM__FACT_RESERVED_BYTES];
  }
}

void gpumem__report_walk_free(gpumem__report_walk *walk) {
  free(walk->nodes);
  *walk = (gpumem__report_walk){0};
}
