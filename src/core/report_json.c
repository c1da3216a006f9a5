/* report_json.c: gpumem_resource_stats_json, a resource's tree with every node's figures as
 * one JSON document (docs/reports.md names its keys, which stay stable: new ones may come,
 * none changes meaning).
 *
 * Every node carries every figure key, null where the resource does not know it, so that a
 * reader never has to ask whether a key exists. A resource reached a second time (the
 * upstream a binning resource's bins share with it) is written as a reference to its first
 * node's id, so that no figure appears twice. Strings are escaped for JSON, and bytes that
 * are not UTF-8 (a user resource's name may be anything) become U+FFFD. */
#include "core/report.h"

#include <stdlib.h>
#include <string.h>

/* The length of the UTF-8 sequence at s (1 to 4), or 0 when it is not one. */
static size_t utf8_length(const unsigned char *s) {
  size_t length = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
  if (s[0] >= 0xF8 || length == 0)
    return 0;
  for (size_t i = 1; i < length; i++)
    if ((s[i] & 0xC0) != 0x80)
      return 0;
  unsigned first = s[0], second = s[1];
  if ((first == 0xE0 && second < 0xA0) || (first == 0xED && second >= 0xA0) ||
      (first == 0xF0 && second < 0x90) || (first == 0xF4 && second >= 0x90))
    return 0; /* overlong, a surrogate, or past U+10FFFF */
  return length;
}

static void write_string(gpumem__text *text, const char *string) {
  gpumem__text_printf(text, "\"");
  for (const unsigned char *s = (const unsigned char *)string; *s;) {
    if (*s == '"' || *s == '\\') {
      gpumem__text_printf(text, "\\%c", *s++);
    } else if (*s < 0x20) {
      gpumem__text_printf(text, "\\u%04x", *s++);
    } else if (*s < 0x80) {
      gpumem__text_printf(text, "%c", *s++);
    } else {
      size_t length = utf8_length(s);
      if (length == 0) {
        gpumem__text_printf(text, "\\ufffd");
        s++;
      } else {
        gpumem__text_printf(text, "%.*s", (int)length, (const char *)s);
        s += length;
      }
    }
  }
  gpumem__text_printf(text, "\"");
}

/* The resource's whole spec (a buffer grown until it fits), as a JSON string. */
static void write_spec(gpumem__text *text, const gpumem_resource *mr) {
  for (size_t size = 512; size <= ((size_t)1 << 20); size *= 2) {
    char *spec = malloc(size);
    if (!spec)
      break;
    gpumem__describe(mr, spec, size);
    if (strlen(spec) + 1 < size) {
      write_string(text, spec);
      free(spec);
      return;
    }
    free(spec);
  }
  gpumem__text_printf(text, "null");
}

static const char *const fact_keys[GPUMEM__FACT_COUNT] = {
    "live_bytes", "live_count",  "reserved_bytes",     "peak_live_bytes", "peak_reserved_bytes",
    "free_bytes", "free_blocks", "largest_free_block", "limit_bytes",     "max_reserved_bytes",
};

static const char *memory_name(gpumem_memory_kind memory) {
  switch (memory) {
  case GPUMEM_MEMORY_MANAGED:
    return "managed";
  case GPUMEM_MEMORY_PINNED_HOST:
    return "pinned_host";
  case GPUMEM_MEMORY_HOST:
    return "host";
  default:
    return "device";
  }
}

typedef struct json_writer {
  gpumem__text *text;
  const gpumem__report_walk *walk;
  int *ids; /* per node: its id (first nodes numbered in order), or its first node's */
} json_writer;

static void write_node(const json_writer *w, int i);

/* The node itself, or a reference to the first node of the same resource. */
static void write_child(const json_writer *w, int i) {
  const gpumem__report_node *node = &w->walk->nodes[i];
  if (node->same_as < 0) {
    write_node(w, i);
    return;
  }
  gpumem__text_printf(w->text, "{\"ref\":%d,\"kind\":", w->ids[i]);
  write_string(w->text, node->mr->ops->kind);
  gpumem__text_printf(w->text, "}");
}

static void write_part(const json_writer *w, int i) {
  const gpumem__report_node *node = &w->walk->nodes[i];
  gpumem__text_printf(w->text, "{\"role\":");
  write_string(w->text, node->role);
  if (strcmp(node->role, "bin") == 0)
    gpumem__text_printf(w->text, ",\"size\":%llu", (unsigned long long)node->key);
  else if (strcmp(node->role, "stream") == 0)
    gpumem__text_printf(w->text, ",\"stream\":\"0x%llx\"", (unsigned long long)node->key);
  gpumem__text_printf(w->text, ",\"resource\":");
  write_child(w, i);
  gpumem__text_printf(w->text, "}");
}

static void write_node(const json_writer *w, int i) {
  const gpumem__report_walk *walk = w->walk;
  const gpumem__report_node *node = &walk->nodes[i];
  const gpumem_resource *mr = node->mr;
  gpumem__text *text = w->text;
  gpumem__text_printf(text, "{\"id\":%d,\"kind\":", w->ids[i]);
  write_string(text, mr->ops->kind);
  gpumem__text_printf(text, ",\"spec\":");
  write_spec(text, mr);
  gpumem__text_printf(text, ",\"device\":%d,\"memory\":\"%s\",\"stream_ordered\":%s", mr->device,
                      memory_name(mr->caps.memory), mr->caps.stream_ordered ? "true" : "false");
  for (int f = 0; f < GPUMEM__FACT_COUNT; f++) {
    if (gpumem__report_has(node, f))
      gpumem__text_printf(text, ",\"%s\":%llu", fact_keys[f], (unsigned long long)node->facts[f]);
    else
      gpumem__text_printf(text, ",\"%s\":null", fact_keys[f]);
  }
  /* Its children follow it in the walk's order, deeper than it, up to the next node at its
   * depth or above. */
  int upstream = -1;
  for (size_t c = (size_t)i + 1; c < walk->count && walk->nodes[c].depth > node->depth; c++)
    if (walk->nodes[c].parent == i && strcmp(walk->nodes[c].role, "upstream") == 0)
      upstream = (int)c;
  gpumem__text_printf(text, ",\"upstream\":");
  if (upstream >= 0)
    write_child(w, upstream);
  else
    gpumem__text_printf(text, "null");
  gpumem__text_printf(text, ",\"parts\":[");
  bool first = true;
  for (size_t c = (size_t)i + 1; c < walk->count && walk->nodes[c].depth > node->depth; c++) {
    if (walk->nodes[c].parent != i || strcmp(walk->nodes[c].role, "upstream") == 0)
      continue;
    gpumem__text_printf(text, first ? "" : ",");
    first = false;
    write_part(w, (int)c);
  }
  gpumem__text_printf(text, "]}");
}

static void write_document(gpumem__text *text, const gpumem__report_walk *walk, int *ids) {
  gpumem__text_printf(text, "{\"format\":\"gpumem.stats\",\"version\":1,\"device\":{\"index\":%d,",
                      walk->device);
  if (walk->device_known)
    gpumem__text_printf(text, "\"free_bytes\":%llu,\"total_bytes\":%llu,",
                        (unsigned long long)walk->device_free,
                        (unsigned long long)walk->device_total);
  else
    gpumem__text_printf(text, "\"free_bytes\":null,\"total_bytes\":null,");
  gpumem__text_printf(text, "\"gpumem_held_bytes\":%llu,\"held_through_resource_bytes\":%llu},",
                      (unsigned long long)walk->process_held, (unsigned long long)walk->tree_held);
  gpumem__text_printf(
      text, "\"complete\":%s,\"resource\":", walk->cut || walk->failed ? "false" : "true");
  json_writer w = {text, walk, ids};
  if (walk->count > 0)
    write_node(&w, 0);
  else
    gpumem__text_printf(text, "null");
  gpumem__text_printf(text, "}");
}

gpumem_status gpumem_resource_stats_json(const gpumem_resource *mr, char *buf, size_t size,
                                         size_t *needed) {
  static const char who[] = "gpumem_resource_stats_json";
  if (!mr || (!buf && size > 0))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s", who,
                        mr ? "buf is NULL with a size" : "the resource is NULL");
  gpumem__report_walk walk;
  gpumem__report_read(mr, &walk);
  gpumem__text text = {0};
  int *ids = malloc((walk.count ? walk.count : 1) * sizeof *ids);
  if (ids) {
    int next = 0;
    for (size_t i = 0; i < walk.count; i++)
      ids[i] = walk.nodes[i].same_as < 0 ? next++ : ids[walk.nodes[i].same_as];
    write_document(&text, &walk, ids);
  } else {
    text.failed = true;
  }
  free(ids);
  gpumem__report_walk_free(&walk);
  gpumem_status status = gpumem__text_copy_out(who, &text, buf, size, needed);
  gpumem__text_free(&text);
  return status;
}
