/* spec_names.c: names a program gives its own resources, so that specs can compose them
 * ("pool(mine)"), with the grammar's checks and messages.
 *
 * A short table under a mutex: names are defined a handful of times per program and looked
 * up only while a spec is built, never on an allocation path. */
#include "api/spec_names.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LENGTH 63

typedef struct named_resource {
  char name[NAME_MAX_LENGTH + 1];
  gpumem_resource *mr; /* retained */
} named_resource;

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static named_resource *names;
static size_t name_count, name_capacity;

static named_resource *find_locked(const char *name, size_t len) {
  for (size_t i = 0; i < name_count; i++)
    if (strlen(names[i].name) == len && strncmp(names[i].name, name, len) == 0)
      return &names[i];
  return NULL;
}

gpumem_resource *gpumem__spec_name_lookup(const char *name, size_t len) {
  pthread_mutex_lock(&names_lock);
  named_resource *found = find_locked(name, len);
  gpumem_resource *mr = found ? gpumem_resource_retain(found->mr) : NULL;
  pthread_mutex_unlock(&names_lock);
  return mr;
}

static bool well_formed(const char *name) {
  size_t len = strlen(name);
  if (len == 0 || len > NAME_MAX_LENGTH || !(isalpha((unsigned char)name[0]) || name[0] == '_'))
    return false;
  for (size_t i = 1; i < len; i++)
    if (!isalnum((unsigned char)name[i]) && name[i] != '_')
      return false;
  return true;
}

/* Takes the name out of the table; returns the resource it named (the caller releases it
 * outside the lock: a release may destroy a chain). */
static gpumem_resource *remove_locked(named_resource *entry) {
  gpumem_resource *mr = entry->mr;
  *entry = names[--name_count];
  return mr;
}

gpumem_status gpumem_spec_define(const char *name, gpumem_resource *mr) {
  if (!name || !well_formed(name))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_spec_define: the name %s%s%s is not letters, digits and '_' "
                        "(a letter or '_' first, at most %d characters)",
                        name ? "'" : "", name ? name : "NULL", name ? "'" : "", NAME_MAX_LENGTH);
  if (gpumem__spec_is_builtin(name, strlen(name)))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_spec_define: '%s' is a built-in resource kind; choose another "
                        "name",
                        name);
  gpumem_resource *replaced = NULL;
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&names_lock);
  named_resource *entry = find_locked(name, strlen(name));
  if (!mr) {
    if (entry)
      replaced = remove_locked(entry);
    else
      status =
          gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                       "gpumem_spec_define: '%s' is not defined, so it cannot be removed", name);
  } else if (entry) {
    replaced = entry->mr;
    entry->mr = gpumem_resource_retain(mr);
  } else {
    if (name_count == name_capacity) {
      size_t capacity = name_capacity ? 2 * name_capacity : 8;
      named_resource *grown = realloc(names, capacity * sizeof *grown);
      if (grown) {
        names = grown;
        name_capacity = capacity;
      }
    }
    if (name_count < name_capacity) {
      entry = &names[name_count++];
      strcpy(entry->name, name);
      entry->mr = gpumem_resource_retain(mr);
    } else {
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_spec_define: out of host memory");
    }
  }
  pthread_mutex_unlock(&names_lock);
  if (replaced && gpumem_resource_release(replaced) != GPUMEM_OK)
    gpumem__clear_error(); /* still in use elsewhere: its last holder destroys it */
  return status;
}
