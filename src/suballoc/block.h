/* block.h: the host-side bookkeeping every suballocator shares: blocks of device memory
 * described by structs in host memory, a slab that recycles those structs, an index of
 * free blocks by size (two-level segregated fit) and a map from address to block.
 *
 * Nothing is ever written into device memory: the host cannot touch it, and a kernel that
 * overruns its buffer must not be able to corrupt the allocator.
 *
 * None of these structures locks; the suballocator that owns them does. */
#ifndef GPUMEM_SUBALLOC_BLOCK_H
#define GPUMEM_SUBALLOC_BLOCK_H

#include "core/internal.h"

#include <stddef.h>
#include <string.h>

/* Sizes are kept in units of the minimum alignment. */
#define GPUMEM__BLOCK_UNIT_SHIFT 8
#define GPUMEM__BLOCK_UNIT ((size_t)1 << GPUMEM__BLOCK_UNIT_SHIFT)

typedef struct gpumem__block gpumem__block;

/* What a block is now: allocated, or how the pool keeps it free: in its free set's index,
 * open (only the set's stream may reuse it) or sealed (covered by the set's event, free for
 * any stream that waits on it), or whole in the set's cache (not merged with its
 * neighbours). A zeroed block is allocated. */
typedef enum gpumem__block_state {
  GPUMEM__BLOCK_ALLOCATED = 0,
  GPUMEM__BLOCK_OPEN = 1,
  GPUMEM__BLOCK_SEALED = 2,
  GPUMEM__BLOCK_CACHED = 3,
  /* Held by a pool's thread front, or handed out by one: the pool's other paths leave it
   * alone, as they do allocated blocks (pool_front.c). */
  GPUMEM__BLOCK_FRONT = 4,
} gpumem__block_state;

/* One cache line: the hot paths touch a block and its neighbours, nothing else. */
struct gpumem__block {
  uintptr_t addr;
  size_t size;
  /* Neighbours in address order inside one contiguous region (NULL at its ends), so that
   * a freed block can merge with free neighbours in O(1). */
  gpumem__block *prev_addr, *next_addr;
  union {
    struct { /* while free: links in a free list */
      gpumem__block *prev_free, *next_free;
    };
    size_t requested; /* while allocated: the size the user asked for */
  };
  void *owner; /* the part that holds the block: a pool's free set, or thread front */
  gpumem__block_state state : 8; /* a byte, to keep the block in one cache line */
  uint8_t region;                /* the part of the suballocator's memory it belongs to */
  /* While in a free index: the class it is filed under, so that removing or refiling it
   * never recomputes the class of its old size; while the index is flat, its place in the
   * index's arrays. */
  union {
    struct {
      uint8_t index_fl, index_sl;
    };
    uint8_t index_slot;
  };
};
_Static_assert(sizeof(gpumem__block) == 64, "a block is one cache line");

/* ---- slab of block structs ---- */

typedef struct gpumem__block_slab {
  gpumem__block *spare; /* recycled structs, linked through next_free */
  void **pages;         /* every page of structs, freed at destroy */
  size_t page_count, page_capacity;
} gpumem__block_slab;

void gpumem__block_slab_init(gpumem__block_slab *slab);
void gpumem__block_slab_destroy(gpumem__block_slab *slab);
/* Adds a page of structs to the spares; false when host memory is exhausted. */
GPUMEM_COLD bool gpumem__block_slab_grow(gpumem__block_slab *slab);

/* A zeroed struct, or NULL when host memory is exhausted. In line: every split takes one. */
static inline gpumem__block *gpumem__block_new(gpumem__block_slab *slab) {
  if (GPUMEM_UNLIKELY(!slab->spare) && !gpumem__block_slab_grow(slab))
    return NULL;
  gpumem__block *block = slab->spare;
  slab->spare = block->next_free;
  memset(block, 0, sizeof *block);
  return block;
}

/* Returns a struct to the spares. */
static inline void gpumem__block_delete(gpumem__block_slab *slab, gpumem__block *block) {
  block->next_free = slab->spare;
  slab->spare = block;
}

/* ---- free index ----
 * Many blocks: two-level segregated fit. First level: the power of two of the size (in
 * units); second level: 16 equal slices of it. A bitmap per level finds the smallest
 * non-empty class at or above a size in a few instructions, so allocation never scans lists
 * of blocks.
 *
 * Few blocks (up to GPUMEM__FLAT_MAX): a flat array of sizes, scanned whole for the best
 * fit, eight or four sizes to an instruction (AVX2 or SSE2). With few blocks the scan costs
 * less than the classes do, and it is exact; and a block that shrinks or grows, as one does at
 * every split and merge, only has its size rewritten, where in the classes it often moves between
 * lists, through branches that depend on the sizes and so are often mispredicted. Programs
 * with few large blocks (big tensors, few at a time) live here. The index turns flat again
 * when it falls to GPUMEM__FLAT_LOW blocks, not at once below the maximum, so that it does
 * not turn back and forth. */

#define GPUMEM__FL_COUNT 48
#define GPUMEM__SL_SHIFT 4
#define GPUMEM__SL_COUNT (1 << GPUMEM__SL_SHIFT)

/* How far a size of `units` units is shifted to find its second level: 0 under
 * 2 * GPUMEM__SL_COUNT units, whose classes are one size each. No branch: sizes are random,
 * so a branch on them would often be mispredicted. */
static inline int gpumem__class_shift(uint64_t units) {
  return 63 - __builtin_clzll(units | GPUMEM__SL_COUNT) - GPUMEM__SL_SHIFT;
}

/* The class of a size of `units` units, flattened: first level * GPUMEM__SL_COUNT + second. */
static inline size_t gpumem__class_index(uint64_t units) {
  int shift = gpumem__class_shift(units);
  return ((size_t)shift << GPUMEM__SL_SHIFT) + (size_t)(units >> shift);
}

#define GPUMEM__FLAT_MAX 64
#define GPUMEM__FLAT_LOW 16
#define GPUMEM__FLAT_SPARE GPUMEM__FLAT_MAX

typedef struct gpumem__free_index {
  bool flat; /* the blocks are in the arrays below, not in the classes */
  /* Sizes in units (0 past the count, which fits nothing) and their blocks; a block's
   * place is its index_slot. The last place, GPUMEM__FLAT_SPARE, never holds a block: the
   * branch-free updates below write there what they do not need. */
  uint32_t flat_units[GPUMEM__FLAT_MAX + 1];
  gpumem__block *flat_blocks[GPUMEM__FLAT_MAX + 1];
  uint64_t fl_bitmap;
  uint32_t sl_bitmap[GPUMEM__FL_COUNT];
  gpumem__block *heads[GPUMEM__FL_COUNT][GPUMEM__SL_COUNT];
  size_t block_count;
  size_t total_bytes;
} gpumem__free_index;

/* Tests only: set, the flat search scans four sizes at a time (SSE2) even where the
 * processor could do eight (AVX2), so that one machine checks both. */
extern bool gpumem__flat_scan_narrow;

void gpumem__free_index_init(gpumem__free_index *index);
void gpumem__free_index_insert(gpumem__free_index *index, gpumem__block *block);
void gpumem__free_index_remove(gpumem__free_index *index, gpumem__block *block);
/* Whether a block of `size` bytes can be in the flat arrays, whose sizes are 32-bit counts
 * of units (up to 1 TiB). */
static inline bool gpumem__flat_holds(size_t size) {
  return (size >> GPUMEM__BLOCK_UNIT_SHIFT) <= UINT32_MAX;
}

/* Files a block of the index under its new size, when that is not a size rewrite in the
 * flat arrays (gpumem__free_index_resized does those itself). */
void gpumem__free_index_refile(gpumem__free_index *index, gpumem__block *block);

/* Refiles a block whose size changed from `old_size` while in the index: nothing moves when
 * the index is flat or the block's class stays the same. In line: every split and merge
 * resizes a block, and in the flat arrays that is one store. */
static inline void gpumem__free_index_resized(gpumem__free_index *index, gpumem__block *block,
                                              size_t old_size) {
  index->total_bytes += block->size - old_size;
  if (GPUMEM_LIKELY(index->flat && gpumem__flat_holds(block->size)))
    index->flat_units[block->index_slot] = (uint32_t)(block->size >> GPUMEM__BLOCK_UNIT_SHIFT);
  else
    gpumem__free_index_refile(index, block);
}

/* `c ? a : b` without a branch, for choices that depend on random data (which neighbours of
 * a freed block are free), on which a branch would often be mispredicted. */
static inline uintptr_t gpumem__pick(bool c, uintptr_t a, uintptr_t b) {
#if defined(__x86_64__)
  /* A conditional move, which compilers often turn into a branch when left to themselves. */
  __asm__("test %2, %2\n\tcmovnz %1, %0" : "+r"(b) : "r"(a), "r"((uint32_t)c) : "cc");
  return b;
#else
  return b ^ ((a ^ b) & (0 - (uintptr_t)c));
#endif
}

/* gpumem__pick for blocks. */
static inline gpumem__block *gpumem__pick_block(bool c, gpumem__block *a, gpumem__block *b) {
  return (gpumem__block *)gpumem__pick(c, (uintptr_t)a, (uintptr_t)b);
}

/* The flat arrays' updates for a merge, without a branch. Removes `block` from the arrays
 * when `remove`; otherwise writes the spare place alone (`block` may then be any block, in
 * the arrays or not). */
static inline void gpumem__flat_remove_if(gpumem__free_index *index, const gpumem__block *block,
                                          bool remove) {
  size_t count = index->block_count;
  size_t at = gpumem__pick(remove, block->index_slot, GPUMEM__FLAT_SPARE);
  size_t last = gpumem__pick(remove, count - 1, GPUMEM__FLAT_SPARE);
  /* The last block takes the removed one's place; its own place reads 0 again. */
  gpumem__block *moved = index->flat_blocks[last];
  index->flat_units[at] = index->flat_units[last];
  index->flat_units[last] = 0;
  index->flat_blocks[at] = moved;
  uint8_t unused_slot;
  *(uint8_t *)gpumem__pick(remove, (uintptr_t)moved + offsetof(gpumem__block, index_slot),
                           (uintptr_t)&unused_slot) = (uint8_t)at;
  index->block_count = count - remove;
  index->total_bytes -= block->size & (0 - (size_t)remove);
}

/* Files `block` in the flat arrays when `is_new`, else rewrites its size there, which was
 * `old_size`; without a branch. The arrays have room, and hold the block's size. */
static inline void gpumem__flat_file_or_resize(gpumem__free_index *index, gpumem__block *block,
                                               bool is_new, size_t old_size) {
  size_t count = index->block_count;
  size_t at = gpumem__pick(is_new, count, block->index_slot);
  index->flat_units[at] = (uint32_t)(block->size >> GPUMEM__BLOCK_UNIT_SHIFT);
  index->flat_blocks[at] = block;
  block->index_slot = (uint8_t)at;
  index->block_count = count + is_new;
  index->total_bytes += block->size - (old_size & (0 - (size_t)!is_new));
}

/* A free block of at least `size` bytes (a multiple of the unit); NULL when none fits. The
 * block stays in the index. Flat: the smallest that fits, the lowest of those. In classes:
 * the best fitting of the few looked at in the request's own class, else one from the
 * smallest larger non-empty class. */
gpumem__block *gpumem__free_index_find(const gpumem__free_index *index, size_t size);
/* The largest free block (walks one class, or the flat array). */
size_t gpumem__free_index_largest(const gpumem__free_index *index);
/* Calls fn on every block; fn may remove the block it is given from the index, nothing
 * else. */
void gpumem__free_index_each(const gpumem__free_index *index,
                             void (*fn)(gpumem__block *block, void *user), void *user);
/* The same for the blocks of at least `least` bytes only, without walking the classes of
 * smaller ones. */
void gpumem__free_index_each_from(const gpumem__free_index *index, size_t least,
                                  void (*fn)(gpumem__block *block, void *user), void *user);

/* Checks the index's own structure (level 2, src/core/debug.c): the flat arrays or the
 * classes, bitmaps and links, each block filed under its size, the count and the bytes.
 * Calls fn on each block (stopping at the first false). False, with what is wrong in
 * `why`, when something is. */
bool gpumem__free_index_check(const gpumem__free_index *index,
                              bool (*fn)(gpumem__block *block, void *user), void *user, char *why,
                              size_t why_size);

/* ---- map from address to allocated block (open addressing, linear probing) ---- */

/* A slot keeps the address beside the block, so that probing never reads a block struct:
 * the probe run stays in the map's own cache lines. An empty slot has addr 0 and block NULL,
 * so the slot a lookup ends at names the block found, or none. */
typedef struct gpumem__block_map_slot {
  uintptr_t addr;
  gpumem__block *block;
} gpumem__block_map_slot;

typedef struct gpumem__block_map {
  gpumem__block_map_slot *slots;
  size_t capacity; /* a power of two */
  unsigned shift;  /* 64 - log2(capacity): a hash keeps its top bits, the best mixed */
  size_t count;
  size_t room; /* the most blocks it holds before it grows (gpumem__map_room) */
} gpumem__block_map;

bool gpumem__block_map_init(gpumem__block_map *map);
void gpumem__block_map_destroy(gpumem__block_map *map);
/* Doubles the map; false when host memory is exhausted (nothing changed then). */
GPUMEM_COLD bool gpumem__block_map_grow(gpumem__block_map *map);

/* Insertion and removal are in line: they run on every allocation and free, and a pool's
 * fast paths stay free of calls (and so of saving registers) with them. */

/* Fibonacci hashing: the product's top bits depend on every bit of the address, so blocks
 * aligned to large powers of two still spread over the whole table. */
static inline size_t gpumem__block_map_home(const gpumem__block_map *map, uintptr_t addr) {
  return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> map->shift);
}

/* The slot holding addr, or the empty slot ending its probe run. */
static inline size_t gpumem__block_map_slot_of(const gpumem__block_map *map, uintptr_t addr) {
  size_t mask = map->capacity - 1;
  size_t i = gpumem__block_map_home(map, addr);
  while (map->slots[i].addr && map->slots[i].addr != addr)
    i = (i + 1) & mask;
  return i;
}

/* The address map is at most an eighth full up to GPUMEM__MAP_SPARSE_SLOTS slots, a quarter
 * above: probe runs stay short, and so do the shifts of deletion. Every extra probe is a branch
 * that depends on the addresses, so often mispredicted: at an eighth rather than a quarter, the
 * random mixed workload costs 5 cycles an operation less, small 1 (sim; a sixteenth gains nothing
 * more), for 128 to 256 bytes of host memory a live block rather than 64 to 128 (the table doubles
 * when full). Past a table of 1 MiB its lines miss the caches anyway, and a program with a million
 * live blocks keeps its map at 64 to 128 MiB. */
#define GPUMEM__MAP_SPARSE_SLOTS ((size_t)1 << 16)

/* The most blocks a map of `capacity` slots holds before it grows. */
static inline size_t gpumem__map_room(size_t capacity) {
  return capacity <= GPUMEM__MAP_SPARSE_SLOTS ? capacity / 8 : capacity / 4;
}

/* Whether the map takes one more block without growing. */
static inline bool gpumem__block_map_has_room(const gpumem__block_map *map) {
  return map->count < map->room;
}

/* Files `block`; the map has room. */
static inline void gpumem__block_map_put(gpumem__block_map *map, gpumem__block *block) {
  map->slots[gpumem__block_map_slot_of(map, block->addr)] =
      (gpumem__block_map_slot){block->addr, block};
  map->count++;
}

/* False when the map had to grow and host memory is exhausted (nothing changed then). */
static inline bool gpumem__block_map_insert(gpumem__block_map *map, gpumem__block *block) {
  if (GPUMEM_UNLIKELY(!gpumem__block_map_has_room(map)) && !gpumem__block_map_grow(map))
    return false;
  gpumem__block_map_put(map, block);
  return true;
}

/* Empties slot `hole` (which holds a block). Backward-shift deletion keeps probe runs
 * unbroken without tombstones. */
static inline void gpumem__block_map_remove_at(gpumem__block_map *map, size_t hole) {
  size_t mask = map->capacity - 1;
  size_t i = hole;
  for (;;) {
    i = (i + 1) & mask;
    uintptr_t next = map->slots[i].addr;
    if (!next)
      break;
    size_t home = gpumem__block_map_home(map, next);
    bool home_in_gap = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!home_in_gap) {
      map->slots[hole] = map->slots[i];
      hole = i;
    }
  }
  map->slots[hole] = (gpumem__block_map_slot){0, NULL};
  map->count--;
}

/* The block at addr, removed from the map; NULL when absent. */
static inline gpumem__block *gpumem__block_map_take(gpumem__block_map *map, uintptr_t addr) {
  size_t hole = gpumem__block_map_slot_of(map, addr);
  gpumem__block *found = map->slots[hole].block;
  if (!map->slots[hole].addr)
    return NULL;
  gpumem__block_map_remove_at(map, hole);
  return found;
}

/* For the checks of address maps (this one, front_map.h's): slot `i` holds `block` for
 * `addr`, which a lookup finds at `found_at`; a map counting `counted` blocks holds
 * `entries`. False, with what is wrong in `why`, when it is not so. */
bool gpumem__map_check_slot(uintptr_t addr, const gpumem__block *block, size_t i, size_t found_at,
                            char *why, size_t why_size);
bool gpumem__map_check_count(size_t counted, size_t entries, char *why, size_t why_size);
/* Checks the map: every slot's block at its address, reachable from its home slot without
 * crossing an empty slot, and the count. Calls fn on each block (stopping at the first
 * false). False, with what is wrong in `why`, when something is. */
bool gpumem__block_map_check(const gpumem__block_map *map,
                             bool (*fn)(gpumem__block *block, void *user), void *user, char *why,
                             size_t why_size);

#endif /* GPUMEM_SUBALLOC_BLOCK_H */
