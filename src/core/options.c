/* options.c: gpumem's environment options, in one table, read once.
 *
 * Every GPUMEM_* variable the library reads is listed here with its default and meaning,
 * so that gpumem_settings() can print the effective configuration and a user can see in
 * one place what the environment changed. */
#include "core/internal.h"
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUMEM__STRINGIFY_(x) #x
#define GPUMEM__STRINGIFY(x) GPUMEM__STRINGIFY_(x)
#define GPUMEM__DEBUG_MAX_TEXT GPUMEM__STRINGIFY(GPUMEM__DEBUG_LEVEL)
#if GPUMEM__DEBUG_LEVEL > 0
#define GPUMEM__DEBUG_DEFAULT_TEXT "1"
#else
#define GPUMEM__DEBUG_DEFAULT_TEXT "0"
#endif

typedef struct option_entry {
  const char *env;
  const char *fallback; /* printed when unset */
  const char *meaning;
} option_entry;

static const option_entry option_table[GPUMEM__OPT_COUNT] = {
    [GPUMEM__OPT_DEVICE] = {"GPUMEM_DEVICE", "cuda", "device backend: cuda | sim"},
    [GPUMEM__OPT_RESOURCE] = {"GPUMEM_RESOURCE", "cuda", "spec of each device's default resource"},
    [GPUMEM__OPT_VERBOSE] = {"GPUMEM_VERBOSE", "0", "1: print these settings at start"},
    [GPUMEM__OPT_SIM_DEVICES] = {"GPUMEM_SIM_DEVICES", "2", "simulated devices"},
    [GPUMEM__OPT_SIM_MEMORY] = {"GPUMEM_SIM_MEMORY", "8GiB", "memory per simulated device"},
    [GPUMEM__OPT_SIM_PAGEABLE] = {"GPUMEM_SIM_PAGEABLE", "1",
                                  "simulated devices access pageable host memory"},
    [GPUMEM__OPT_SIM_VMM] = {"GPUMEM_SIM_VMM", "1",
                             "simulated devices support virtual memory management"},
    [GPUMEM__OPT_SIM_HAZARD] = {"GPUMEM_SIM_HAZARD", "count",
                                "on a cross-stream hazard: count | abort | off (no check)"},
    [GPUMEM__OPT_SIM_MANAGED_POOLS] = {"GPUMEM_SIM_MANAGED_POOLS", "1",
                                       "simulated devices have pools of managed memory"},
    [GPUMEM__OPT_SIM_VMM_CALL_US] = {"GPUMEM_SIM_VMM_CALL_US", "0",
                                     "microseconds each simulated vmm call takes, or h200"},
    [GPUMEM__OPT_DEBUG] = {"GPUMEM_DEBUG", GPUMEM__DEBUG_DEFAULT_TEXT,
                           "checks: 0 none, 1 assertions, 2 validation after every call, "
                           "3 guards and quarantine (at most " GPUMEM__DEBUG_MAX_TEXT
                           ", the level built in)"},
    [GPUMEM__OPT_DEBUG_EVERY] = {"GPUMEM_DEBUG_EVERY", "1",
                                 "at level 2, validate after every N-th call of a thread"},
    [GPUMEM__OPT_DEBUG_QUARANTINE] = {"GPUMEM_DEBUG_QUARANTINE", "256MiB",
                                      "at level 3, bytes of freed blocks held poisoned"},
    [GPUMEM__OPT_DEBUG_QUARANTINE_BLOCKS] = {"GPUMEM_DEBUG_QUARANTINE_BLOCKS", "1024",
                                             "at level 3, freed blocks held poisoned"},
    [GPUMEM__OPT_LOG_FILE] = {"GPUMEM_LOG_FILE", "",
                              "log each device's default resource to this file (.devN "
                              "before the extension); the file of logs given none"},
    [GPUMEM__OPT_BIAS_AGAIN] = {"GPUMEM_BIAS_AGAIN", "1",
                                "1: a lock another thread took from its first thread is "
                                "biased again to a thread that takes it alone many times; "
                                "0: never"},
};

static pthread_once_t options_once = PTHREAD_ONCE_INIT;
static char *option_values[GPUMEM__OPT_COUNT];

/* The environment is copied once so that a later setenv by the program cannot change the
 * library's behaviour half way, and so that reads need no lock. */
static void read_options(void) {
  for (int i = 0; i < GPUMEM__OPT_COUNT; i++) {
    const char *value = getenv(option_table[i].env);
    option_values[i] = (value && *value) ? strdup(value) : NULL;
  }
}

const char *gpumem__option_string(gpumem__option option) {
  pthread_once(&options_once, read_options);
  return option_values[option];
}

uint64_t gpumem__option_size(gpumem__option option, uint64_t fallback) {
  const char *text = gpumem__option_string(option);
  uint64_t value;
  size_t used;
  if (text && gpumem__parse_size(text, 0, &value, &used) && text[used] == '\0')
    return value;
  return fallback;
}

static pthread_once_t settings_once = PTHREAD_ONCE_INIT;
static char settings_text[2048];

static void build_settings(void) {
  size_t used = 0;
  used += (size_t)snprintf(settings_text + used, sizeof settings_text - used,
                           "gpumem %d.%d.%d\nbackend=%s\n", GPUMEM_VERSION_MAJOR,
                           GPUMEM_VERSION_MINOR, GPUMEM_VERSION_PATCH, gpumem_backend_name());
  for (int i = 0; i < GPUMEM__OPT_COUNT && used < sizeof settings_text; i++) {
    const char *value = gpumem__option_string((gpumem__option)i);
    used += (size_t)snprintf(settings_text + used, sizeof settings_text - used, "%s=%s%s    # %s\n",
                             option_table[i].env, value ? value : option_table[i].fallback,
                             value ? "" : " (default)", option_table[i].meaning);
  }
}

const char *gpumem_settings(void) {
  pthread_once(&settings_once, build_settings);
  return settings_text;
}
