/* user.c (upstream): resources whose allocate and deallocate a program writes itself
 * (gpumem_user_resource_create), so that its own allocator composes with gpumem's pools and
 * adaptors.
 *
 * The user's functions get only what the contract promises and are checked for what they
 * return: every pointer they hand out is filed in the same live-pointer table the base
 * resources keep, so a double, foreign or wrongly sized free never reaches them, and a
 * NULL, misaligned or already live pointer from their allocate never reaches the caller.
 * No lock is held across their calls: the table's shard lock covers only its own update. */
#include "core/ptrmap.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USER_NAME_MAX 64

typedef struct user_resource {
  gpumem_resource header;
  /* A table of its own, whose kind is the user's name, so that gpumem_resource_name, its
   * description and every message name the resource as its author does. */
  gpumem__resource_ops ops;
  gpumem_user_resource_ops user; /* the user's table, as this library's version of it */
  void *state;
  char name[USER_NAME_MAX];
  gpumem__ptrmap live;
} user_resource;

/* The failure of the user's allocate, told as this resource's: the user's message (its
 * first line: a gpumem call of the user's code that ran out of memory added a report, and
 * this resource's own report follows) after the resource's name, or where the user's code
 * set none, one that says what happened. An out-of-memory failure keeps the cause a gpumem
 * resource the user's code called noted (`noted`), as this resource's; else its cause is
 * the user's word alone. */
static gpumem_status allocate_failed(user_resource *self, size_t bytes, gpumem_status status,
                                     bool message_set, bool noted) {
  char why[640];
  if (message_set)
    snprintf(why, sizeof why, "%.*s", (int)strcspn(gpumem_last_error_message(), "\n"),
             gpumem_last_error_message());
  else
    snprintf(why, sizeof why, "its allocate returned %s and set no message",
             gpumem_status_name(status));
  if (status == GPUMEM_ERR_OUT_OF_MEMORY) {
    gpumem__oom_note note = gpumem__last_oom();
    if (noted && note.cause != GPUMEM__OOM_OTHER)
      gpumem__note_oom(note.cause, &self->header, bytes);
    else /* its own words, or those of a user resource beneath that said it */
      gpumem__note_oom_said(&self->header, bytes, noted ? note.said : message_set ? why : NULL);
    return gpumem__fail_out_of_memory(&self->header, bytes, why);
  }
  return gpumem__fail(status, "user resource '%s': allocating %zu bytes: %s", self->name, bytes,
                      why);
}

static gpumem_status user_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  user_resource *self = (user_resource *)mr;
  gpumem_status status = gpumem__check_stream(mr->dev, mr->device, stream);
  if (status != GPUMEM_OK)
    return status;
  void *block = NULL;
  uint64_t serial = gpumem__error_serial();
  uint64_t oom_serial = gpumem__last_oom().serial;
  status = self->user.allocate(self->state, bytes, alignment, stream, &block);
  if (status != GPUMEM_OK)
    return allocate_failed(self, bytes, status, gpumem__error_serial() != serial,
                           gpumem__last_oom().serial != oom_serial);
  if (!block)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "user resource '%s': its allocate of %zu bytes returned success with a "
                        "NULL pointer",
                        self->name, bytes);
  if ((uintptr_t)block % alignment != 0) {
    self->user.deallocate(self->state, block, bytes, alignment, stream);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "user resource '%s': its allocate of %zu bytes aligned to %zu returned "
                        "%p, which is not aligned so; it was given back to its deallocate",
                        self->name, bytes, alignment, block);
  }
  status = gpumem__ptrmap_insert_new(&self->live, block, bytes);
  if (status == GPUMEM_ERR_MISUSE)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "user resource '%s': its allocate of %zu bytes returned %p, which is "
                        "already a live allocation of it; not recorded and not freed, since "
                        "the earlier allocation still uses that memory",
                        self->name, bytes, block);
  if (status != GPUMEM_OK) {
    self->user.deallocate(self->state, block, bytes, alignment, stream);
    gpumem__note_oom(GPUMEM__OOM_HOST, mr, bytes);
    return gpumem__fail(status,
                        "user resource '%s': out of host memory for the table of live "
                        "allocations",
                        self->name);
  }
  *ptr = block;
  return GPUMEM_OK;
}

static gpumem_status user_deallocate(gpumem_resource *mr, void *ptr, size_t bytes, size_t alignment,
                                     gpumem_stream stream) {
  user_resource *self = (user_resource *)mr;
  void *base;
  size_t raw_bytes;
  gpumem_status status =
      gpumem__ptrmap_take(&self->live, ptr, bytes, self->name, &base, &raw_bytes);
  if (status != GPUMEM_OK)
    return status;
  uint64_t serial = gpumem__error_serial();
  status = self->user.deallocate(self->state, ptr, bytes, alignment, stream);
  if (status != GPUMEM_OK) {
    bool message_set = gpumem__error_serial() != serial;
    char why[640];
    snprintf(why, sizeof why, "%s", message_set ? gpumem_last_error_message() : "");
    /* Leave the resource as it was: the block stays live and can be freed again. */
    gpumem__ptrmap_insert(&self->live, ptr, bytes, ptr, bytes);
    if (message_set)
      return gpumem__fail(status, "user resource '%s': freeing %p (%zu bytes): %s", self->name, ptr,
                          bytes, why);
    return gpumem__fail(status,
                        "user resource '%s': freeing %p (%zu bytes): its deallocate returned %s "
                        "and set no message; the allocation stays live",
                        self->name, ptr, bytes, gpumem_status_name(status));
  }
  return GPUMEM_OK;
}

static gpumem_status user_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  const user_resource *self = (const user_resource *)mr;
  gpumem_status status = gpumem__ptrmap_query(&self->live, what, out);
  if (status != GPUMEM_ERR_UNSUPPORTED || !self->user.query)
    return status;
  uint64_t value = 0;
  status = self->user.query(self->state, what, &value);
  if (status == GPUMEM_OK)
    *out = value;
  return status == GPUMEM_OK ? GPUMEM_OK : GPUMEM_ERR_UNSUPPORTED;
}

static gpumem_status user_destroy(gpumem_resource *mr) {
  user_resource *self = (user_resource *)mr;
  if (self->user.destroy)
    self->user.destroy(self->state);
  gpumem__ptrmap_destroy(&self->live);
  free(self);
  return GPUMEM_OK;
}

/* The size of the first version of the user's table: every field up to `name`. */
#define USER_OPS_FIRST_SIZE (offsetof(gpumem_user_resource_ops, name) + sizeof(const char *))

/* Reads the user's table into `copy` (this library's version of it), or says which field is
 * wrong. */
static gpumem_status read_ops(const gpumem_user_resource_ops *ops, gpumem_user_resource_ops *copy) {
  static const char who[] = "gpumem_user_resource_create";
  if (!ops)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: ops is NULL", who);
  if (ops->size < USER_OPS_FIRST_SIZE)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "%s: ops->size is %zu, smaller than the first version of the struct "
                        "(%zu bytes): set it to sizeof(gpumem_user_resource_ops)",
                        who, ops->size, (size_t)USER_OPS_FIRST_SIZE);
  if (ops->version == 0 || ops->version > GPUMEM_USER_RESOURCE_OPS_VERSION)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "%s: ops->version %u is unknown (this library knows versions 1 to %u): "
                        "set it to GPUMEM_USER_RESOURCE_OPS_VERSION",
                        who, (unsigned)ops->version, GPUMEM_USER_RESOURCE_OPS_VERSION);
  memset(copy, 0, sizeof *copy);
  memcpy(copy, ops, ops->size < sizeof *copy ? ops->size : sizeof *copy);
  if (!copy->allocate)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: ops->allocate is NULL", who);
  if (!copy->deallocate)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: ops->deallocate is NULL", who);
  if ((unsigned)copy->memory > (unsigned)GPUMEM_MEMORY_HOST)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "%s: ops->memory is %d, not a gpumem_memory_kind", who, (int)copy->memory);
  return GPUMEM_OK;
}

gpumem_status gpumem_user_resource_create(int device, const gpumem_user_resource_ops *ops,
                                          void *state, gpumem_resource **out) {
  gpumem_user_resource_ops user;
  gpumem_status status = read_ops(ops, &user);
  if (status != GPUMEM_OK)
    return status;
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_user_resource_create: out is NULL");
  const gpumem__device_ops *dev;
  status = gpumem__device_for("gpumem_user_resource_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  user_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "gpumem_user_resource_create: out of host memory");
  snprintf(self->name, sizeof self->name, "%s", user.name && *user.name ? user.name : "user");
  user.name = self->name;
  self->user = user;
  self->state = state;
  self->ops = (gpumem__resource_ops){
      .version = GPUMEM__RESOURCE_OPS_VERSION,
      .kind = self->name,
      .allocate = user_allocate,
      .deallocate = user_deallocate,
      .query = user_query,
      .destroy = user_destroy,
  };
  gpumem__ptrmap_init(&self->live);
  gpumem__resource_init(&self->header, &self->ops, device, dev, NULL);
  self->header.caps.memory = user.memory;
  self->header.caps.stream_ordered = user.stream_ordered != 0;
  *out = &self->header;
  return GPUMEM_OK;
}
