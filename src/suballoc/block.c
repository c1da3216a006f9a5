/* block.c: block structs, their slab, the segregated-fit free index and the address map
 * (see block.h). */
#include "suballoc/block.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Slab
 * ------------------------------------------------------------------------------------- */

#define SLAB_PAGE_BLOCKS 256

/* A block struct on a line of its own, and the line beside it left empty: processors fetch
 * lines in 128-byte pairs (the adjacent-line prefetcher), and a struct sharing its pair with
 * another thread's block, which that thread's front writes at every allocation and free,
 * made sixteen threads on their own streams 12 to 15% slower on the GPU host
 * (docs/gpu-runs.md, seventeenth session). A struct still costs one line to touch. */
typedef struct slab_slot {
  _Alignas(128) gpumem__block block;
} slab_slot;
_Static_assert(sizeof(slab_slot) == 128, "a slab slot is a pair of lines");

void gpumem__block_slab_init(gpumem__block_slab *slab) {
  memset(slab, 0, sizeof *slab);
}

void gpumem__block_slab_destroy(gpumem__block_slab *slab) {
  for (size_t i = 0; i < slab->page_count; i++)
    free(slab->pages[i]);
  free(slab->pages);
  memset(slab, 0, sizeof *slab);
}

bool gpumem__block_slab_grow(gpumem__block_slab *slab) {
  if (slab->page_count == slab->page_capacity) {
    size_t capacity = slab->page_capacity ? slab->page_capacity * 2 : 16;
    void **pages = realloc(slab->pages, capacity * sizeof *pages);
    if (!pages)
      return false;
    slab->pages = pages;
    slab->page_capacity = capacity;
  }
  slab_slot *page = aligned_alloc(_Alignof(slab_slot), SLAB_PAGE_BLOCKS * sizeof *page);
  if (!page)
    return false;
  slab->pages[slab->page_count++] = page;
  for (size_t i = 0; i < SLAB_PAGE_BLOCKS; i++) {
    page[i].block.next_free = slab->spare;
    slab->spare = &page[i].block;
  }
  return true;
}

/* ---------------------------------------------------------------------------------------
 * Free index
 * ------------------------------------------------------------------------------------- */

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static inline int msb64(uint64_t x) {
  return 63 - __builtin_clzll(x);
}

/* ---- classes ---- */

/* The class a block of `size` bytes is filed under: the largest class whose lower bound
 * is at most size. */
static inline void class_of(size_t size, int *fl, int *sl) {
  size_t class_index = gpumem__class_index(size >> GPUMEM__BLOCK_UNIT_SHIFT);
  *fl = (int)(class_index >> GPUMEM__SL_SHIFT);
  *sl = (int)(class_index & (GPUMEM__SL_COUNT - 1));
}

/* The smallest class in which every block holds at least `size` bytes. */
static inline void class_at_least(size_t size, int *fl, int *sl) {
  uint64_t units = size >> GPUMEM__BLOCK_UNIT_SHIFT;
  units += ((uint64_t)1 << gpumem__class_shift(units)) - 1;
  class_of(units << GPUMEM__BLOCK_UNIT_SHIFT, fl, sl);
}

/* Links `block` into class (fl, sl). Counts are the callers' business. */
static inline void link_into_class(gpumem__free_index *index, gpumem__block *block, int fl,
                                   int sl) {
  gpumem__block *head = index->heads[fl][sl];
  block->index_fl = (uint8_t)fl;
  block->index_sl = (uint8_t)sl;
  block->prev_free = NULL;
  block->next_free = head;
  if (head)
    head->prev_free = block;
  index->heads[fl][sl] = block;
  index->fl_bitmap |= (uint64_t)1 << fl;
  index->sl_bitmap[fl] |= 1u << sl;
}

/* Unlinks `block` from the class it is filed under. */
static inline void unlink_from_class(gpumem__free_index *index, gpumem__block *block) {
  int fl = block->index_fl, sl = block->index_sl;
  gpumem__block *prev = block->prev_free, *next = block->next_free;
  if (next)
    next->prev_free = prev;
  if (prev) {
    prev->next_free = next;
    return;
  }
  index->heads[fl][sl] = next;
  if (!next) { /* the class is empty now */
    index->sl_bitmap[fl] &= ~(1u << sl);
    if (!index->sl_bitmap[fl])
      index->fl_bitmap &= ~((uint64_t)1 << fl);
  }
}

static inline void file_in_class(gpumem__free_index *index, gpumem__block *block) {
  int fl, sl;
  class_of(block->size, &fl, &sl);
  link_into_class(index, block, fl, sl);
}

/* How many blocks of the request's own class are looked at for the best fit: enough to
 * find an exact size among repeats, few enough to keep allocation constant-time. */
#define BEST_FIT_PROBES 4

static gpumem__block *find_in_classes(const gpumem__free_index *index, size_t size) {
  int fl, sl;
  class_of(size, &fl, &sl);
  if (fl >= GPUMEM__FL_COUNT)
    return NULL;
  gpumem__block *best = NULL;
  int probes = 0;
  for (gpumem__block *b = index->heads[fl][sl]; b && probes < BEST_FIT_PROBES;
       b = b->next_free, probes++) {
    if (b->size >= size &&
        (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr)))
      best = b;
    if (best && best->size == size)
      break;
  }
  if (best)
    return best;
  class_at_least(size, &fl, &sl);
  if (fl >= GPUMEM__FL_COUNT)
    return NULL;
  uint32_t sl_map = index->sl_bitmap[fl] & (~0u << sl);
  if (!sl_map) {
    uint64_t fl_map = fl + 1 < 64 ? index->fl_bitmap & (~(uint64_t)0 << (fl + 1)) : 0;
    if (!fl_map)
      return NULL;
    fl = __builtin_ctzll(fl_map);
    sl_map = index->sl_bitmap[fl];
  }
  sl = __builtin_ctz(sl_map);
  return index->heads[fl][sl];
}

/* ---- flat ---- */

static inline void flat_put(gpumem__free_index *index, gpumem__block *block) {
  size_t at = index->block_count++;
  index->flat_units[at] = (uint32_t)(block->size >> GPUMEM__BLOCK_UNIT_SHIFT);
  index->flat_blocks[at] = block;
  block->index_slot = (uint8_t)at;
}

/* Files every block of the flat arrays in the classes. */
static void flat_to_classes(gpumem__free_index *index) {
  index->flat = false;
  memset(index->flat_units, 0, sizeof index->flat_units);
  for (size_t i = 0; i < index->block_count; i++)
    file_in_class(index, index->flat_blocks[i]);
}

/* Moves every block of the classes to the flat arrays, if they all fit there; the index
 * holds fewer than GPUMEM__FLAT_MAX blocks. */
static void classes_to_flat(gpumem__free_index *index) {
  gpumem__block *all[GPUMEM__FLAT_MAX];
  size_t n = 0;
  for (uint64_t fl_map = index->fl_bitmap; fl_map; fl_map &= fl_map - 1) {
    int fl = __builtin_ctzll(fl_map);
    for (uint32_t sl_map = index->sl_bitmap[fl]; sl_map; sl_map &= sl_map - 1)
      for (gpumem__block *b = index->heads[fl][__builtin_ctz(sl_map)]; b; b = b->next_free) {
        if (!gpumem__flat_holds(b->size))
          return;
        all[n++] = b;
      }
  }
  index->fl_bitmap = 0;
  memset(index->sl_bitmap, 0, sizeof index->sl_bitmap);
  memset(index->heads, 0, sizeof index->heads);
  index->flat = true;
  index->block_count = 0;
  for (size_t i = 0; i < n; i++)
    flat_put(index, all[i]);
}

/* The best fit in the flat arrays takes two passes over the sizes. The first finds the
 * least difference between a size and the request: it wraps around to a huge number for a
 * block too small, so one unsigned minimum is the best fit, and no branch depends on the
 * sizes. The second marks every place holding that size, of which the caller takes the
 * lowest address: blocks of one size are common, and taking the lowest keeps a pool low.
 * Both passes read past the count, up to the next multiple of 8: those places hold 0,
 * which fits nothing. */
typedef struct flat_fit {
  uint32_t least;  /* the least difference; over UINT32_MAX - want when nothing fits */
  uint64_t places; /* bit i: place i holds a block of the best-fitting size */
} flat_fit;

bool gpumem__flat_scan_narrow;

#if defined(__x86_64__)
/* Eight sizes to an instruction where the processor has AVX2, which nearly every host of
 * a recent GPU has; four (SSE2, which every x86-64 has) elsewhere. */
__attribute__((target("avx2"))) static flat_fit flat_fit_avx2(const uint32_t *units, size_t count,
                                                              uint32_t want) {
  const __m256i wanted = _mm256_set1_epi32((int)want);
  __m256i least8 = _mm256_set1_epi32(-1);
  for (size_t i = 0; i < count; i += 8) {
    __m256i diff = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)&units[i]), wanted);
    least8 = _mm256_min_epu32(least8, diff);
  }
  __m128i least4 =
      _mm_min_epu32(_mm256_castsi256_si128(least8), _mm256_extracti128_si256(least8, 1));
  least4 = _mm_min_epu32(least4, _mm_shuffle_epi32(least4, _MM_SHUFFLE(1, 0, 3, 2)));
  least4 = _mm_min_epu32(least4, _mm_shuffle_epi32(least4, _MM_SHUFFLE(2, 3, 0, 1)));
  flat_fit fit = {(uint32_t)_mm_cvtsi128_si32(least4), 0};
  const __m256i best = _mm256_set1_epi32((int)(fit.least + want));
  for (size_t i = 0; i < count; i += 8) {
    __m256i same = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)&units[i]), best);
    fit.places |= (uint64_t)(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(same)) << i;
  }
  return fit;
}

static flat_fit flat_fit_sse2(const uint32_t *units, size_t count, uint32_t want) {
  /* SSE2 compares signed numbers only: the differences are offset by 2^31 to order as
   * unsigned ones do. */
  const __m128i offset = _mm_set1_epi32(INT32_MIN), wanted = _mm_set1_epi32((int)want);
  __m128i least4 = _mm_set1_epi32(INT32_MAX);
  for (size_t i = 0; i < count; i += 4) {
    __m128i units4 = _mm_loadu_si128((const __m128i *)&units[i]);
    __m128i diff = _mm_xor_si128(_mm_sub_epi32(units4, wanted), offset);
    __m128i better = _mm_cmplt_epi32(diff, least4);
    least4 = _mm_or_si128(_mm_and_si128(better, diff), _mm_andnot_si128(better, least4));
  }
  uint32_t lanes[4];
  _mm_storeu_si128((__m128i *)lanes, least4);
  flat_fit fit = {UINT32_MAX, 0};
  for (int lane = 0; lane < 4; lane++)
    if ((lanes[lane] ^ 0x80000000u) < fit.least)
      fit.least = lanes[lane] ^ 0x80000000u;
  const __m128i best = _mm_set1_epi32((int)(fit.least + want));
  for (size_t i = 0; i < count; i += 4) {
    __m128i same = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)&units[i]), best);
    fit.places |= (uint64_t)(unsigned)_mm_movemask_ps(_mm_castsi128_ps(same)) << i;
  }
  return fit;
}

static flat_fit flat_fit_of(const uint32_t *units, size_t count, uint32_t want) {
  /* The processor's answer is read from a word the runtime fills in at load time: no call. */
  if (__builtin_cpu_supports("avx2") && !gpumem__flat_scan_narrow)
    return flat_fit_avx2(units, count, want);
  return flat_fit_sse2(units, count, want);
}
#else /* one form only */
static flat_fit flat_fit_of(const uint32_t *units, size_t count, uint32_t want) {
  flat_fit fit = {UINT32_MAX, 0};
  for (size_t i = 0; i < count; i++) {
    uint32_t diff = units[i] - want;
    fit.least = diff < fit.least ? diff : fit.least;
  }
  for (size_t i = 0; i < count; i++)
    fit.places |= (uint64_t)(units[i] == fit.least + want) << i;
  return fit;
}
#endif

static gpumem__block *find_in_flat(const gpumem__free_index *index, size_t size) {
  if (!gpumem__flat_holds(size))
    return NULL; /* larger than any block the arrays hold */
  uint32_t want = (uint32_t)(size >> GPUMEM__BLOCK_UNIT_SHIFT);
  size_t count = index->block_count;
  flat_fit fit = flat_fit_of(index->flat_units, count, want);
  if (count == 0 || fit.least > UINT32_MAX - want)
    return NULL;
  uint64_t places = fit.places;
  gpumem__block *lowest = index->flat_blocks[__builtin_ctzll(places)];
  for (places &= places - 1; places; places &= places - 1) {
    gpumem__block *b = index->flat_blocks[__builtin_ctzll(places)];
    if (b->addr < lowest->addr)
      lowest = b;
  }
  return lowest;
}

/* ---- the index ---- */

void gpumem__free_index_init(gpumem__free_index *index) {
  memset(index, 0, sizeof *index);
  index->flat = true;
}

void gpumem__free_index_insert(gpumem__free_index *index, gpumem__block *block) {
  GPUMEM__ASSERT(NULL, block->size > 0 && block->size % GPUMEM__BLOCK_UNIT == 0,
                 "a free block's size is a positive multiple of the unit");
  index->total_bytes += block->size;
  if (!index->flat && index->block_count < GPUMEM__FLAT_LOW && gpumem__flat_holds(block->size))
    classes_to_flat(index);
  if (index->flat) {
    if (index->block_count < GPUMEM__FLAT_MAX && gpumem__flat_holds(block->size)) {
      flat_put(index, block);
      return;
    }
    flat_to_classes(index);
  }
  file_in_class(index, block);
  index->block_count++;
}

void gpumem__free_index_remove(gpumem__free_index *index, gpumem__block *block) {
  GPUMEM__ASSERT(NULL, index->block_count > 0 && index->total_bytes >= block->size,
                 "a free index's count and bytes never go below zero");
  index->total_bytes -= block->size;
  if (!index->flat) {
    unlink_from_class(index, block);
    index->block_count--;
    return;
  }
  /* The last block takes the removed one's place; its own place reads 0 again. */
  size_t at = block->index_slot, last = --index->block_count;
  gpumem__block *moved = index->flat_blocks[last];
  index->flat_units[at] = index->flat_units[last];
  index->flat_units[last] = 0;
  index->flat_blocks[at] = moved;
  moved->index_slot = (uint8_t)at;
}

void gpumem__free_index_refile(gpumem__free_index *index, gpumem__block *block) {
  if (index->flat) { /* too large for the arrays: every block goes to the classes, as it is now */
    flat_to_classes(index);
    return;
  }
  int fl, sl;
  class_of(block->size, &fl, &sl);
  if (fl == block->index_fl && sl == block->index_sl)
    return;
  unlink_from_class(index, block);
  link_into_class(index, block, fl, sl);
}

gpumem__block *gpumem__free_index_find(const gpumem__free_index *index, size_t size) {
  if (index->flat)
    return find_in_flat(index, size);
  return index->block_count == 0 ? NULL : find_in_classes(index, size);
}

size_t gpumem__free_index_largest(const gpumem__free_index *index) {
  size_t largest = 0;
  if (index->flat) {
    for (size_t i = 0; i < index->block_count; i++)
      if (index->flat_blocks[i]->size > largest)
        largest = index->flat_blocks[i]->size;
    return largest;
  }
  if (!index->fl_bitmap)
    return 0;
  int fl = msb64(index->fl_bitmap);
  int sl = 31 - __builtin_clz(index->sl_bitmap[fl]);
  for (const gpumem__block *b = index->heads[fl][sl]; b; b = b->next_free)
    if (b->size > largest)
      largest = b->size;
  return largest;
}

void gpumem__free_index_each(const gpumem__free_index *index,
                             void (*fn)(gpumem__block *block, void *user), void *user) {
  gpumem__free_index_each_from(index, 0, fn, user);
}

void gpumem__free_index_each_from(const gpumem__free_index *index, size_t least,
                                  void (*fn)(gpumem__block *block, void *user), void *user) {
  if (index->flat) {
    /* Backwards: a removal moves the last block, already seen, into the removed one's
     * place. */
    for (size_t i = index->block_count; i-- > 0;)
      if (index->flat_blocks[i]->size >= least)
        fn(index->flat_blocks[i], user);
    return;
  }
  /* From the class holding `least`: the blocks of that class under it are skipped. */
  int first_fl = 0, first_sl = 0;
  if (least > 0)
    class_of(least, &first_fl, &first_sl);
  for (int fl = first_fl; fl < GPUMEM__FL_COUNT; fl++) {
    if (!(index->fl_bitmap & ((uint64_t)1 << fl)))
      continue;
    for (int sl = fl == first_fl ? first_sl : 0; sl < GPUMEM__SL_COUNT; sl++) {
      gpumem__block *b = index->heads[fl][sl];
      while (b) {
        gpumem__block *next = b->next_free;
        if (b->size >= least)
          fn(b, user);
        b = next;
      }
    }
  }
}

/* ---------------------------------------------------------------------------------------
 * Address map
 * ------------------------------------------------------------------------------------- */

#define MAP_INITIAL_LOG2 10

bool gpumem__block_map_init(gpumem__block_map *map) {
  map->capacity = (size_t)1 << MAP_INITIAL_LOG2;
  map->shift = 64 - MAP_INITIAL_LOG2;
  map->count = 0;
  map->room = gpumem__map_room(map->capacity);
  map->slots = calloc(map->capacity, sizeof *map->slots);
  return map->slots != NULL;
}

void gpumem__block_map_destroy(gpumem__block_map *map) {
  free(map->slots);
  map->slots = NULL;
  map->capacity = map->count = map->room = 0;
}

bool gpumem__block_map_grow(gpumem__block_map *map) {
  gpumem__block_map bigger = {.capacity = map->capacity * 2,
                              .shift = map->shift - 1,
                              .count = map->count,
                              .room = gpumem__map_room(map->capacity * 2)};
  bigger.slots = calloc(bigger.capacity, sizeof *bigger.slots);
  if (!bigger.slots)
    return false;
  for (size_t i = 0; i < map->capacity; i++)
    if (map->slots[i].addr)
      bigger.slots[gpumem__block_map_slot_of(&bigger, map->slots[i].addr)] = map->slots[i];
  free(map->slots);
  *map = bigger;
  return true;
}

/* ---------------------------------------------------------------------------------------
 * Checks (debug level 2)
 * ------------------------------------------------------------------------------------- */

#include <stdarg.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4))) static bool complain(char *why, size_t size,
                                                           const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(why, size, format, args);
  va_end(args);
  return false;
}

static bool check_flat(const gpumem__free_index *index,
                       bool (*fn)(gpumem__block *block, void *user), void *user, char *why,
                       size_t size, uint64_t *bytes) {
  if (index->block_count > GPUMEM__FLAT_MAX)
    return complain(why, size, "flat free index holds %zu blocks, more than its %d places",
                    index->block_count, GPUMEM__FLAT_MAX);
  if (index->fl_bitmap)
    return complain(why, size, "flat free index has class bits set (0x%llx)",
                    (unsigned long long)index->fl_bitmap);
  if (index->flat_blocks[GPUMEM__FLAT_SPARE])
    return complain(why, size, "flat free index: the spare place holds a block");
  for (size_t i = 0; i <= GPUMEM__FLAT_SPARE; i++) { /* the spare place reads 0 too */
    if (i >= index->block_count) {
      if (index->flat_units[i])
        return complain(why, size,
                        "flat free index: place %zu past the count %zu reads %u "
                        "units, not 0",
                        i, index->block_count, index->flat_units[i]);
      continue;
    }
    gpumem__block *b = index->flat_blocks[i];
    if (!b)
      return complain(why, size, "flat free index: place %zu has no block", i);
    if (b->index_slot != i)
      return complain(why, size, "flat free index: block at %#lx is in place %zu but says %u",
                      (unsigned long)b->addr, i, b->index_slot);
    if (index->flat_units[i] != (uint64_t)(b->size >> GPUMEM__BLOCK_UNIT_SHIFT))
      return complain(why, size,
                      "flat free index: block at %#lx of %zu bytes is listed with "
                      "%u units",
                      (unsigned long)b->addr, b->size, index->flat_units[i]);
    *bytes += b->size;
    if (fn && !fn(b, user))
      return false;
  }
  return true;
}

static bool check_classes(const gpumem__free_index *index,
                          bool (*fn)(gpumem__block *block, void *user), void *user, char *why,
                          size_t size, uint64_t *bytes) {
  size_t count = 0;
  for (int fl = 0; fl < GPUMEM__FL_COUNT; fl++) {
    if (!!(index->fl_bitmap & ((uint64_t)1 << fl)) != !!index->sl_bitmap[fl])
      return complain(why, size,
                      "free index: first-level bit %d disagrees with its second "
                      "level",
                      fl);
    for (int sl = 0; sl < GPUMEM__SL_COUNT; sl++) {
      const gpumem__block *head = index->heads[fl][sl];
      if (!!(index->sl_bitmap[fl] & (1u << sl)) != !!head)
        return complain(why, size, "free index: class (%d, %d) is %s but its bit says %s", fl, sl,
                        head ? "not empty" : "empty", head ? "empty" : "not empty");
      const gpumem__block *prev = NULL;
      for (gpumem__block *b = index->heads[fl][sl]; b; prev = b, b = b->next_free) {
        if (++count > index->block_count)
          return complain(why, size,
                          "free index: more blocks in the classes than its count "
                          "%zu (or a cycle)",
                          index->block_count);
        int want_fl, want_sl;
        class_of(b->size, &want_fl, &want_sl);
        if (b->prev_free != prev)
          return complain(why, size,
                          "free index: block at %#lx in class (%d, %d) has a wrong "
                          "back link",
                          (unsigned long)b->addr, fl, sl);
        if (want_fl != fl || want_sl != sl || b->index_fl != fl || b->index_sl != sl)
          return complain(why, size,
                          "free index: block at %#lx of %zu bytes is in class "
                          "(%d, %d), says (%d, %d), belongs in (%d, %d)",
                          (unsigned long)b->addr, b->size, fl, sl, b->index_fl, b->index_sl,
                          want_fl, want_sl);
        *bytes += b->size;
        if (fn && !fn(b, user))
          return false;
      }
    }
  }
  if (count != index->block_count)
    return complain(why, size, "free index: count %zu but %zu blocks in the classes",
                    index->block_count, count);
  return true;
}

bool gpumem__free_index_check(const gpumem__free_index *index,
                              bool (*fn)(gpumem__block *block, void *user), void *user, char *why,
                              size_t why_size) {
  uint64_t bytes = 0;
  bool ok = index->flat ? check_flat(index, fn, user, why, why_size, &bytes)
                        : check_classes(index, fn, user, why, why_size, &bytes);
  if (ok && bytes != index->total_bytes)
    return complain(why, why_size, "free index: %zu bytes counted, its blocks hold %llu",
                    index->total_bytes, (unsigned long long)bytes);
  return ok;
}

bool gpumem__map_check_slot(uintptr_t addr, const gpumem__block *block, size_t i, size_t found_at,
                            char *why, size_t why_size) {
  if (!block || block->addr != addr)
    return complain(why, why_size, "address map: the slot of %#lx holds %s", (unsigned long)addr,
                    block ? "a block at another address" : "no block");
  if (found_at != i)
    return complain(why, why_size, "address map: %#lx cannot be found from its home slot",
                    (unsigned long)addr);
  return true;
}

bool gpumem__map_check_count(size_t counted, size_t entries, char *why, size_t why_size) {
  return counted == entries ||
         complain(why, why_size, "address map: count %zu but %zu entries", counted, entries);
}

bool gpumem__block_map_check(const gpumem__block_map *map,
                             bool (*fn)(gpumem__block *block, void *user), void *user, char *why,
                             size_t why_size) {
  size_t count = 0;
  for (size_t i = 0; i < map->capacity; i++) {
    uintptr_t addr = map->slots[i].addr;
    if (!addr)
      continue;
    count++;
    gpumem__block *b = map->slots[i].block;
    if (!gpumem__map_check_slot(addr, b, i, gpumem__block_map_slot_of(map, addr), why, why_size) ||
        (fn && !fn(b, user)))
      return false;
  }
  return gpumem__map_check_count(map->count, count, why, why_size);
}
