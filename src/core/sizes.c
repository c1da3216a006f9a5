/* sizes.c: byte sizes as people write them ("1GiB", "512M", "50%"), for specs and the
 * environment. K, M, G, T and the KiB forms are powers of 1024; KB, MB, GB, TB are powers
 * of 1000, as disk and network people mean them. */
#include "core/internal.h"

#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

typedef struct size_unit {
  const char *name;
  uint64_t factor;
} size_unit;

/* Longest names first, so that "KiB" is not read as "K" followed by garbage. */
static const size_unit units[] = {
    {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},   {"TiB", 1ull << 40},
    {"KB", 1000ull},     {"MB", 1000000ull},  {"GB", 1000000000ull}, {"TB", 1000000000000ull},
    {"K", 1ull << 10},   {"M", 1ull << 20},   {"G", 1ull << 30},     {"T", 1ull << 40},
    {"B", 1ull},
};

bool gpumem__parse_size(const char *text, uint64_t percent_of, uint64_t *out, size_t *consumed) {
  const char *p = text;
  if (!isdigit((unsigned char)*p))
    return false;
  /* Integer part and optional fraction, read by hand so that locale never matters. */
  double whole = 0;
  uint64_t integer = 0;
  bool integer_overflow = false;
  while (isdigit((unsigned char)*p)) {
    unsigned digit = (unsigned)(*p - '0');
    if (integer > (UINT64_MAX - digit) / 10)
      integer_overflow = true;
    integer = integer * 10 + digit;
    whole = whole * 10 + digit;
    p++;
  }
  double fraction = 0, scale = 0.1;
  bool has_fraction = false;
  if (*p == '.' && isdigit((unsigned char)p[1])) {
    has_fraction = true;
    p++;
    while (isdigit((unsigned char)*p)) {
      fraction += scale * (*p - '0');
      scale /= 10;
      p++;
    }
  }
  uint64_t factor = 1;
  bool percent = false;
  if (*p == '%') {
    percent = true;
    p++;
  } else {
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      size_t len = strlen(units[i].name);
      if (strncasecmp(p, units[i].name, len) == 0 && !isalnum((unsigned char)p[len])) {
        /* Case matters for the 1000s: "KB" vs "Kb" is ambiguous, accept only exact. */
        if (strncmp(p, units[i].name, len) != 0 && len == 2 && units[i].factor % 1000 == 0)
          continue;
        factor = units[i].factor;
        p += len;
        break;
      }
    }
  }
  if (isalnum((unsigned char)*p))
    return false;
  uint64_t result;
  if (percent) {
    double value = (whole + fraction) / 100.0 * (double)percent_of;
    if (whole + fraction > 100.0)
      return false;
    result = (uint64_t)value;
  } else if (!has_fraction) {
    if (integer_overflow || (factor > 1 && integer > UINT64_MAX / factor))
      return false;
    result = integer * factor;
  } else {
    double value = (whole + fraction) * (double)factor;
    if (!(value < 18446744073709551616.0))
      return false;
    result = (uint64_t)value;
  }
  *out = result;
  if (consumed)
    *consumed = (size_t)(p - text);
  return true;
}
