/* pointer_hash.h: what the open-addressing tables keyed by pointers share (the live table
 * of base resources, core/ptrmap.c; the tracking adaptor's, adaptors/tracking_table.c):
 * the hash of a pointer, and the rule of backward-shift deletion. */
#ifndef GPUMEM_CORE_POINTER_HASH_H
#define GPUMEM_CORE_POINTER_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Allocations are at least 256-byte aligned, so the low bits carry nothing; the rest is
 * mixed so that both the low bits (slots) and the high bits (shards) spread. */
static inline uint64_t gpumem__hash_pointer(uintptr_t ptr) {
  uint64_t x = (uint64_t)ptr >> 8;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* Backward-shift deletion: whether the entry at slot i, whose home slot is `home`, may move
 * into the hole at `hole` (its home is not in (hole, i], cyclically). */
static inline bool gpumem__probe_fills_hole(size_t hole, size_t i, size_t home) {
  bool home_between = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
  return !home_between;
}

#endif /* GPUMEM_CORE_POINTER_HASH_H */
