/* spec_names.h: the resources a program named for specs (gpumem_spec_define), for the spec
 * parser. */
#ifndef GPUMEM_API_SPEC_NAMES_H
#define GPUMEM_API_SPEC_NAMES_H

#include "core/internal.h"

/* A new reference to the resource named name[0..len), or NULL when none is. */
gpumem_resource *gpumem__spec_name_lookup(const char *name, size_t len);

/* True when name[0..len) is a built-in resource kind of the grammar (spec.c). */
bool gpumem__spec_is_builtin(const char *name, size_t len);

#endif /* GPUMEM_API_SPEC_NAMES_H */
