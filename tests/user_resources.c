/* user_resources.c: resources a program writes (gpumem_user_resource_create) and the
 * failure callback adaptor (gpumem_failure_callback_create, the spec's retry).
 *
 * The user resource here is written with the public API only: it draws its memory from a
 * gpumem "cuda" resource (so that on the simulated device the memory is the simulation's
 * and its hazard checks see it), counts its calls, and misbehaves on request. The tests
 * compose it under a pool and the adaptors, try every misuse the library must catch on
 * either side of it, the checks of its operations struct, and that destroy runs exactly
 * once, at the last release. The failure callback is driven by a faulty upstream, a pool
 * with a maximum size, a callback that frees memory, one that allocates from the adaptor
 * itself, one that refuses, and many threads. */
#include "check.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * A user resource over gpumem's cuda resource
 * ------------------------------------------------------------------------------------- */

typedef enum misbehaviour {
  BEHAVE = 0,
  RETURN_NULL, /* success with NULL */
  RETURN_MISALIGNED /* a pointer 64 bytes past an aligned one */,
  RETURN_LIVE,  /* the pointer of the last allocation again */
  FAIL_QUIETLY, /* fail with `fail_status` and set no message */
  FAIL_SAYING,  /* fail with `fail_status` and a message of its own */
} misbehaviour;

typedef struct counting_state {
  gpumem_resource *backing;
  pthread_mutex_t lock; /* guards the fields below against the threads test */
  int allocates, deallocates, destroys;
  misbehaviour next; /* for the next allocate only */
  gpumem_status fail_status;
  int fail_deallocate; /* the next deallocate fails */
  void *last;
  void *misaligned_base; /* the real block behind a misaligned pointer */
  size_t misaligned_bytes;
} counting_state;

static gpumem_status counting_allocate(void *state, size_t bytes, size_t alignment,
                                       gpumem_stream stream, void **ptr) {
  counting_state *s = state;
  pthread_mutex_lock(&s->lock);
  s->allocates++;
  misbehaviour how = s->next;
  s->next = BEHAVE;
  void *last = s->last;
  pthread_mutex_unlock(&s->lock);
  switch (how) {
  case RETURN_NULL:
    *ptr = NULL;
    return GPUMEM_OK;
  case RETURN_LIVE:
    *ptr = last;
    return GPUMEM_OK;
  case FAIL_QUIETLY:
    return s->fail_status;
  case FAIL_SAYING:
    gpumem_set_error_message("the counting allocator is closed today");
    return s->fail_status;
  default:
    break;
  }
  if (how == RETURN_MISALIGNED) {
    gpumem_status status = gpumem_allocate_aligned(s->backing, bytes + 256, alignment, stream, ptr);
    if (status == GPUMEM_OK) {
      s->misaligned_base = *ptr;
      s->misaligned_bytes = bytes + 256;
      *ptr = (char *)*ptr + 64;
    }
    return status;
  }
  gpumem_status status = gpumem_allocate_aligned(s->backing, bytes, alignment, stream, ptr);
  if (status == GPUMEM_OK) {
    pthread_mutex_lock(&s->lock);
    s->last = *ptr;
    pthread_mutex_unlock(&s->lock);
  }
  return status;
}

static gpumem_status counting_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                         gpumem_stream stream) {
  counting_state *s = state;
  pthread_mutex_lock(&s->lock);
  s->deallocates++;
  int fail = s->fail_deallocate;
  s->fail_deallocate = 0;
  pthread_mutex_unlock(&s->lock);
  if (fail)
    return GPUMEM_ERR_CUDA;
  if (ptr == (char *)s->misaligned_base + 64)
    return gpumem_deallocate_aligned(s->backing, s->misaligned_base, s->misaligned_bytes, alignment,
                                     stream);
  return gpumem_deallocate_aligned(s->backing, ptr, bytes, alignment, stream);
}

static gpumem_status counting_query(void *state, gpumem_query what, uint64_t *out) {
  counting_state *s = state;
  if (what == GPUMEM_QUERY_RESERVED_BYTES)
    return gpumem_resource_query(s->backing, GPUMEM_QUERY_LIVE_BYTES, out);
  if (what == GPUMEM_QUERY_LIVE_COUNT)
    *out = 12345; /* never asked: the library answers live facts from its own table */
  return GPUMEM_ERR_UNSUPPORTED;
}

static void counting_destroy(void *state) {
  counting_state *s = state;
  s->destroys++;
}

static gpumem_user_resource_ops counting_ops(void) {
  return (gpumem_user_resource_ops){
      .size = sizeof(gpumem_user_resource_ops),
      .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
      .allocate = counting_allocate,
      .deallocate = counting_deallocate,
      .query = counting_query,
      .destroy = counting_destroy,
      .memory = GPUMEM_MEMORY_DEVICE,
      .stream_ordered = 0,
      .name = "counting",
  };
}

static void state_init(counting_state *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->lock, NULL);
  CHECK_OK(gpumem_cuda_create(0, &s->backing));
}

static void state_fini(counting_state *s) {
  CHECK_U64_EQ(check_query(s->backing, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(s->backing));
  pthread_mutex_destroy(&s->lock);
}

static gpumem_resource *counting_resource(counting_state *s) {
  gpumem_user_resource_ops ops = counting_ops();
  gpumem_resource *mr = NULL;
  CHECK_OK(gpumem_user_resource_create(0, &ops, s, &mr));
  return mr;
}

/* ---------------------------------------------------------------------------------------
 * User resources
 * ------------------------------------------------------------------------------------- */

static void test_basic_use(void) {
  counting_state s;
  state_init(&s);
  gpumem_resource *mr = counting_resource(&s);
  CHECK_CONTAINS(gpumem_resource_name(mr), "counting");
  char spec[64];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  CHECK_CONTAINS(spec, "counting");
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &caps));
  CHECK_EQ(caps.memory, GPUMEM_MEMORY_DEVICE);
  CHECK_EQ(caps.stream_ordered, 0);
  CHECK_EQ(caps.places_at_address, 0);
  gpumem_resource *up;
  CHECK_STATUS(gpumem_resource_upstream(mr, &up), GPUMEM_ERR_UNSUPPORTED);

  /* The front end's checks run before the user's code. */
  void *p = NULL;
  CHECK_OK(gpumem_allocate(mr, 0, NULL, &p));
  CHECK_PTR_EQ(p, NULL);
  CHECK_STATUS(gpumem_allocate_aligned(mr, 100, 300, NULL, &p), GPUMEM_ERR_INVALID_ARGUMENT);
  int devices = 0;
  CHECK_OK(gpumem_device_count(&devices));
  if (devices > 1) { /* a stream of another device: refused before the user's code runs */
    gpumem_stream other;
    CHECK_OK(gpumem_stream_create(1, &other));
    CHECK_STATUS(gpumem_allocate(mr, 100, other, &p), GPUMEM_ERR_INVALID_STREAM);
    CHECK_OK(gpumem_stream_destroy(other));
  }
  CHECK_EQ(s.allocates, 0);

  CHECK_OK(gpumem_allocate_aligned(mr, 1000, 4096, NULL, &p));
  CHECK_EQ((uintptr_t)p % 4096, 0);
  CHECK_OK(gpumem_memset_async(p, 3, 1000, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 1000);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_PEAK_LIVE_BYTES), 1000);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 1000); /* the user's answer */
  uint64_t value;
  CHECK_STATUS(gpumem_resource_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK, &value),
               GPUMEM_ERR_UNSUPPORTED);
  CHECK_OK(gpumem_deallocate_aligned(mr, p, 1000, 4096, NULL));
  CHECK_EQ(s.allocates, 1);
  CHECK_EQ(s.deallocates, 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);

  /* The last release with live memory refuses and calls no destroy; then it destroys. */
  CHECK_OK(gpumem_allocate(mr, 10, NULL, &p));
  gpumem_resource_retain(mr);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_MISUSE, "1 live allocation");
  CHECK_EQ(s.destroys, 0);
  CHECK_OK(gpumem_deallocate(mr, p, 10, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(s.destroys, 1);
  state_fini(&s);
}

static void test_frees_the_library_refuses(void) {
  counting_state s;
  state_init(&s);
  gpumem_resource *mr = counting_resource(&s);
  void *p, *q;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  CHECK_OK(gpumem_allocate(mr, 2000, NULL, &q));
  int deallocates = s.deallocates;
  char ptr_text[32];
  snprintf(ptr_text, sizeof ptr_text, "%p", p);
  /* A pointer it never gave (inside a live block), a wrong size: refused, user not called. */
  CHECK_FAILS_WITH(gpumem_deallocate(mr, (char *)p + 256, 100, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 999, NULL), GPUMEM_ERR_MISUSE, "1000 bytes");
  CHECK_CONTAINS(gpumem_last_error_message(), ptr_text);
  CHECK_EQ(s.deallocates, deallocates);
  CHECK_OK(gpumem_deallocate(mr, p, 1000, NULL));
  /* A double free. */
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 1000, NULL), GPUMEM_ERR_MISUSE, ptr_text);
  CHECK_EQ(s.deallocates, deallocates + 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);

  /* A deallocate that fails leaves the allocation live; freeing again works. */
  s.fail_deallocate = 1;
  CHECK_FAILS_WITH(gpumem_deallocate(mr, q, 2000, NULL), GPUMEM_ERR_CUDA, "stays live");
  CHECK_CONTAINS(gpumem_last_error_message(), "counting");
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem_deallocate(mr, q, 2000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(s.destroys, 1);
  state_fini(&s);
}

static void test_allocations_the_library_refuses(void) {
  counting_state s;
  state_init(&s);
  gpumem_resource *mr = counting_resource(&s);
  void *const sentinel = (void *)0x77;
  void *p = sentinel;

  s.next = RETURN_NULL;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_MISUSE, "NULL pointer");
  CHECK_CONTAINS(gpumem_last_error_message(), "counting");
  CHECK_PTR_EQ(p, sentinel);

  s.next = RETURN_MISALIGNED;
  int deallocates = s.deallocates;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_MISUSE, "not aligned");
  CHECK_PTR_EQ(p, sentinel);
  CHECK_EQ(s.deallocates, deallocates + 1); /* given back at once */
  CHECK_U64_EQ(check_query(s.backing, GPUMEM_QUERY_LIVE_COUNT), 0);

  void *live;
  CHECK_OK(gpumem_allocate(mr, 300, NULL, &live));
  s.next = RETURN_LIVE;
  deallocates = s.deallocates;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_MISUSE, "already a live");
  CHECK_PTR_EQ(p, sentinel);
  CHECK_EQ(s.deallocates, deallocates); /* not freed: the earlier allocation uses it */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 300);

  /* Failures keep their status; a message is made where the user set none. */
  gpumem_set_error_message("an old message");
  s.next = FAIL_QUIETLY;
  s.fail_status = GPUMEM_ERR_CUDA;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_CUDA, "set no message");
  CHECK_CONTAINS(gpumem_last_error_message(), "user resource 'counting'");
  CHECK(strstr(gpumem_last_error_message(), "an old message") == NULL);
  s.next = FAIL_SAYING;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_CUDA, "closed today");
  CHECK_CONTAINS(gpumem_last_error_message(), "user resource 'counting'");
  s.next = FAIL_QUIETLY;
  s.fail_status = GPUMEM_ERR_OUT_OF_MEMORY;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_OUT_OF_MEMORY, "out of memory");
  CHECK_CONTAINS(gpumem_last_error_message(), "counting");
  CHECK_PTR_EQ(p, sentinel);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);

  CHECK_OK(gpumem_deallocate(mr, live, 300, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  state_fini(&s);
}

static void check_bad_ops(const gpumem_user_resource_ops *ops, const char *needle) {
  counting_state s = {0};
  gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;
  gpumem_resource *mr = untouched;
  CHECK_FAILS_WITH(gpumem_user_resource_create(0, ops, &s, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                   needle);
  CHECK_PTR_EQ(mr, untouched);
  CHECK_EQ(s.destroys, 0);
}

static void test_bad_ops(void) {
  check_bad_ops(NULL, "ops is NULL");
  gpumem_user_resource_ops ops = counting_ops();
  ops.size = 0;
  check_bad_ops(&ops, "ops->size");
  ops.size = offsetof(gpumem_user_resource_ops, name); /* one field short of version 1 */
  check_bad_ops(&ops, "ops->size");
  ops = counting_ops();
  ops.version = 0;
  check_bad_ops(&ops, "ops->version 0");
  ops.version = GPUMEM_USER_RESOURCE_OPS_VERSION + 1;
  check_bad_ops(&ops, "ops->version");
  ops = counting_ops();
  ops.allocate = NULL;
  check_bad_ops(&ops, "ops->allocate");
  ops = counting_ops();
  ops.deallocate = NULL;
  check_bad_ops(&ops, "ops->deallocate");
  ops = counting_ops();
  ops.memory = (gpumem_memory_kind)17;
  check_bad_ops(&ops, "ops->memory");
  ops = counting_ops();
  CHECK_FAILS_WITH(gpumem_user_resource_create(0, &ops, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  gpumem_resource *mr = NULL;
  CHECK_STATUS(gpumem_user_resource_create(999, &ops, NULL, &mr), GPUMEM_ERR_INVALID_DEVICE);

  /* A caller built against a later, larger struct of the same version; optional fields
   * left out; the kind of memory and stream order become the capabilities. */
  struct {
    gpumem_user_resource_ops ops;
    char later[32];
  } larger = {counting_ops(), {0}};
  larger.ops.size = sizeof larger;
  larger.ops.query = NULL;
  larger.ops.destroy = NULL;
  larger.ops.name = NULL;
  larger.ops.memory = GPUMEM_MEMORY_MANAGED;
  larger.ops.stream_ordered = 5;
  counting_state s;
  state_init(&s);
  CHECK_OK(gpumem_user_resource_create(GPUMEM_CURRENT_DEVICE, &larger.ops, &s, &mr));
  CHECK_CONTAINS(gpumem_resource_name(mr), "user");
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &caps));
  CHECK_EQ(caps.memory, GPUMEM_MEMORY_MANAGED);
  CHECK_EQ(caps.stream_ordered, 1);
  uint64_t value;
  CHECK_STATUS(gpumem_resource_query(mr, GPUMEM_QUERY_RESERVED_BYTES, &value),
               GPUMEM_ERR_UNSUPPORTED);
  void *p;
  CHECK_OK(gpumem_allocate(mr, 64, NULL, &p));
  CHECK_OK(gpumem_deallocate(mr, p, 64, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(s.destroys, 0); /* it has none */
  state_fini(&s);
}

typedef struct callback_state {
  int calls;
  int say_yes; /* times to say yes before saying no */
  size_t last_bytes;
  gpumem_resource *free_from;
  void *free_ptr; /* freed by the first call, when set */
  size_t free_bytes;
  gpumem_resource *allocate_from; /* allocated from (and freed) by each call, when set */
  gpumem_status nested_status;
  int destroys;
} callback_state;

static void count_destroy(void *user) {
  ((callback_state *)user)->destroys++;
}

static int counting_callback(size_t bytes, void *user) {
  callback_state *c = user;
  c->calls++;
  c->last_bytes = bytes;
  gpumem_set_error_message("a message of the callback's own");
  if (c->free_ptr) {
    CHECK_OK(gpumem_deallocate(c->free_from, c->free_ptr, c->free_bytes, NULL));
    c->free_ptr = NULL;
  }
  if (c->allocate_from) {
    void *p = NULL;
    c->nested_status = gpumem_allocate(c->allocate_from, bytes, NULL, &p);
    if (c->nested_status == GPUMEM_OK)
      CHECK_OK(gpumem_deallocate(c->allocate_from, p, bytes, NULL));
  }
  return c->calls <= c->say_yes;
}

static gpumem_resource *failure_callback(gpumem_resource *upstream, callback_state *c) {
  gpumem_failure_callback_options opts = {.callback = counting_callback, .user = c};
  gpumem_resource *mr = NULL;
  CHECK_OK(gpumem_failure_callback_create(upstream, &opts, &mr));
  return mr;
}

/* Under a pool and the adaptors: the chain works, and the user's destroy runs once, when
 * the last resource over it goes. */
static void test_composed(void) {
  counting_state s;
  state_init(&s);
  gpumem_resource *user = counting_resource(&s);
  gpumem_pool_options pool_opts = {.initial_size = 1 << 20};
  gpumem_resource *pool, *faulty, *retry;
  CHECK_OK(gpumem_pool_create(user, &pool_opts, &pool));
  CHECK_OK(gpumem_faulty_create(pool, NULL, &faulty));
  callback_state c = {0};
  retry = failure_callback(faulty, &c);
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_resource_release(faulty)); /* the retry adaptor keeps both */
  gpumem_resource *binning;
  CHECK_OK(gpumem_binning_create(user, NULL, &binning));
  CHECK_OK(gpumem_resource_release(user)); /* the pool and binning keep it */
  CHECK_EQ(s.destroys, 0);
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  void *ptrs[32];
  for (int i = 0; i < 32; i++) {
    CHECK_OK(gpumem_allocate(retry, 1000 * (size_t)(i + 1), stream, &ptrs[i]));
    CHECK_OK(gpumem_memset_async(ptrs[i], i, 1000, stream));
  }
  CHECK_U64_EQ(check_query(user, GPUMEM_QUERY_LIVE_COUNT), 1); /* the pool's one chunk */
  for (int i = 0; i < 32; i++)
    CHECK_OK(gpumem_deallocate(retry, ptrs[i], 1000 * (size_t)(i + 1), stream));
  void *b;
  CHECK_OK(gpumem_allocate(binning, 5000, stream, &b));
  CHECK_OK(gpumem_allocate(binning, 5 << 20, stream, &ptrs[0])); /* past the bins */
  CHECK_OK(gpumem_deallocate(binning, ptrs[0], 5 << 20, stream));
  CHECK_OK(gpumem_deallocate(binning, b, 5000, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(retry));
  CHECK_EQ(s.destroys, 0);
  CHECK_OK(gpumem_resource_release(binning));
  CHECK_EQ(s.destroys, 1);
  CHECK_NO_HAZARD("the blocks of one stream, freed after its work");
  state_fini(&s);
}

/* ---------------------------------------------------------------------------------------
 * The failure callback adaptor
 * ------------------------------------------------------------------------------------- */

static void test_retries_counted(void) {
  gpumem_resource *faulty;
  CHECK_OK(gpumem_resource_from_spec("faulty(cuda, fail_every=1, status=out_of_memory)", &faulty));
  callback_state c = {.say_yes = 3};
  gpumem_resource *mr = failure_callback(faulty, &c);
  CHECK_CONTAINS(gpumem_resource_name(mr), "retry");
  void *p = (void *)0x99;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 4096, NULL, &p), GPUMEM_ERR_OUT_OF_MEMORY,
                   "injected by the faulty adaptor");
  CHECK_CONTAINS(gpumem_last_error_message(), "gave up after 3 retries");
  /* The message is the upstream's, not the callback's. */
  CHECK(strstr(gpumem_last_error_message(), "callback's own") == NULL);
  CHECK_EQ(c.calls, 4); /* 3 yes, then no */
  CHECK_EQ(c.last_bytes, 4096);
  CHECK_PTR_EQ(p, (void *)0x99);

  /* A callback that says no at once: one call, no retry. */
  c = (callback_state){.say_yes = 0};
  CHECK_STATUS(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_EQ(c.calls, 1);

  /* Other failures are not retried. */
  gpumem_faulty_options injected = {.fail_every = 1};
  CHECK_OK(gpumem_faulty_reset(faulty, &injected));
  c = (callback_state){.say_yes = 100};
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_INJECTED_FAULT, "injected");
  CHECK_EQ(c.calls, 0);

  /* A callback that makes the upstream work again: the retry succeeds. */
  gpumem_faulty_options oom_once = {.fail_at = 1, .status = GPUMEM_ERR_OUT_OF_MEMORY};
  CHECK_OK(gpumem_faulty_reset(faulty, &oom_once));
  c = (callback_state){.say_yes = 1};
  CHECK_OK(gpumem_allocate(mr, 100, NULL, &p));
  CHECK_EQ(c.calls, 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_MISUSE, "live allocation");
  CHECK_OK(gpumem_deallocate(mr, p, 100, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);

  char spec[256];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  CHECK_CONTAINS(spec, "retry(faulty(cuda");
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(faulty));
}

/* Under a pool at its maximum: the callback frees a block, the retry gets its memory. */
static void test_callback_frees_memory(void) {
  gpumem_resource *pool;
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB, max=4MiB)", &pool));
  void *big;
  CHECK_OK(gpumem_allocate(pool, 3 << 20, NULL, &big));
  callback_state c = {.say_yes = 5, .free_from = pool, .free_ptr = big, .free_bytes = 3 << 20};
  gpumem_resource *mr = failure_callback(pool, &c);
  void *p;
  CHECK_OK(gpumem_allocate(mr, 2 << 20, NULL, &p));
  CHECK_EQ(c.calls, 1);
  CHECK_OK(gpumem_deallocate(mr, p, 2 << 20, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(pool));
}

/* A callback that allocates from the adaptor itself: its failure is not retried (no
 * recursion), and nothing deadlocks. */
static void test_callback_allocates_from_the_adaptor(void) {
  gpumem_resource *faulty;
  CHECK_OK(gpumem_resource_from_spec("faulty(cuda, fail_every=1, status=out_of_memory)", &faulty));
  callback_state c = {.say_yes = 2};
  gpumem_resource *mr = failure_callback(faulty, &c);
  c.allocate_from = mr;
  void *p;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 512, NULL, &p), GPUMEM_ERR_OUT_OF_MEMORY, "faulty");
  CHECK_EQ(c.calls, 3); /* the nested failures called no callback */
  CHECK_EQ(c.nested_status, GPUMEM_ERR_OUT_OF_MEMORY);
  /* When the upstream works, the callback's own allocation succeeds inside it. */
  gpumem_faulty_options oom_once = {.fail_at = 1, .status = GPUMEM_ERR_OUT_OF_MEMORY};
  CHECK_OK(gpumem_faulty_reset(faulty, &oom_once));
  c = (callback_state){.say_yes = 1, .allocate_from = mr};
  CHECK_OK(gpumem_allocate(mr, 512, NULL, &p));
  CHECK_EQ(c.nested_status, GPUMEM_OK);
  CHECK_OK(gpumem_deallocate(mr, p, 512, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(faulty));
}

static void test_bad_failure_callback_options(void) {
  gpumem_resource *cuda, *mr = (gpumem_resource *)(uintptr_t)0x5eed;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  gpumem_failure_callback_options opts = {0};
  CHECK_FAILS_WITH(gpumem_failure_callback_create(cuda, &opts, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "callback");
  CHECK_FAILS_WITH(gpumem_failure_callback_create(cuda, NULL, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "opts");
  opts.callback = counting_callback;
  CHECK_FAILS_WITH(gpumem_failure_callback_create(NULL, &opts, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream");
  CHECK_FAILS_WITH(gpumem_failure_callback_create(cuda, &opts, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out");
  CHECK_PTR_EQ(mr, (gpumem_resource *)(uintptr_t)0x5eed);

  /* The optional destroy runs once, at the adaptor's last release. */
  callback_state c = {0};
  opts = (gpumem_failure_callback_options){
      .callback = counting_callback, .user = &c, .destroy = count_destroy};
  CHECK_OK(gpumem_failure_callback_create(cuda, &opts, &mr));
  gpumem_resource *pool;
  CHECK_OK(gpumem_pool_create(mr, NULL, &pool));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(c.destroys, 0);
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_EQ(c.destroys, 1);
  CHECK_OK(gpumem_resource_release(cuda));
}

/* The spec's retry: waiting for the device frees what a driver pool freed on a stream.
 * On a small simulated device, async's frees on a stream become free only when the stream's
 * work is done. */
static void test_retry_spec(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("retry(faulty(cuda, fail_every=1, status=out_of_memory), "
                                     "attempts=3)",
                                     &mr));
  char spec[256];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  CHECK_CONTAINS(spec, "attempts=3");
  uint64_t syncs = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE);
  void *p;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, NULL, &p), GPUMEM_ERR_OUT_OF_MEMORY, "faulty");
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) - syncs, 3);
  CHECK_OK(gpumem_resource_release(mr));
  /* A pass-through adaptor: over vmm it reports vmm's placement, so a pool over it grows
   * in place. */
  CHECK_OK(gpumem_resource_from_spec("retry(vmm)", &mr));
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &caps));
  CHECK_EQ(caps.places_at_address, 1);
  CHECK(caps.granularity > 0);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_from_spec("retry(cuda)", &mr));
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  CHECK_CONTAINS(spec, "retry(cuda, attempts=1)");
  CHECK_OK(gpumem_resource_release(mr));
}

/* ---------------------------------------------------------------------------------------
 * Threads: a pool over a user resource and a retry adaptor, shared by many threads
 * ------------------------------------------------------------------------------------- */

enum { thread_count = 8, thread_ops = 2000 };

static void *thread_worker(void *arg) {
  gpumem_resource *mr = arg;
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  void *ptrs[16] = {0};
  size_t sizes[16] = {0};
  uint64_t x = (uint64_t)(uintptr_t)&stream;
  for (int op = 0; op < thread_ops; op++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int slot = (int)((x >> 33) % 16);
    if (ptrs[slot]) {
      CHECK_OK(gpumem_deallocate(mr, ptrs[slot], sizes[slot], stream));
      ptrs[slot] = NULL;
    } else {
      sizes[slot] = 1 + (size_t)((x >> 40) % (64 << 10));
      CHECK_OK(gpumem_allocate(mr, sizes[slot], stream, &ptrs[slot]));
    }
  }
  for (int slot = 0; slot < 16; slot++)
    if (ptrs[slot])
      CHECK_OK(gpumem_deallocate(mr, ptrs[slot], sizes[slot], stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  return NULL;
}

static void run_threads(gpumem_resource *mr) {
  pthread_t threads[thread_count];
  for (int i = 0; i < thread_count; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, thread_worker, mr), 0);
  for (int i = 0; i < thread_count; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
}

static void test_threads(void) {
  counting_state s;
  state_init(&s);
  gpumem_resource *user = counting_resource(&s);
  run_threads(user); /* the user resource alone: every call reaches its functions */
  gpumem_resource *pool, *retry;
  gpumem_pool_options opts = {.initial_size = 1};
  CHECK_OK(gpumem_pool_create(user, &opts, &pool));
  callback_state c = {.say_yes = 0};
  retry = failure_callback(pool, &c);
  run_threads(retry);
  CHECK_OK(gpumem_resource_release(retry));
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_resource_release(user));
  CHECK_EQ(s.destroys, 1);
  CHECK_NO_HAZARD("the blocks of one stream, freed after its work");
  state_fini(&s);
}

int main(void) {
  check_init_backend();
  test_basic_use();
  test_frees_the_library_refuses();
  test_allocations_the_library_refuses();
  test_bad_ops();
  test_composed();
  test_bad_failure_callback_options();
  test_retries_counted();
  test_callback_frees_memory();
  test_callback_allocates_from_the_adaptor();
  if (check_on_sim())
    test_retry_spec();
  else
    printf(
        "retry spec: not checked on a GPU (it counts the simulated device's synchronizations)\n");
  test_threads();
  printf("user resources and failure callbacks: passed\n");
  return 0;
}
