/* check_throws.hpp: the C++ tests' check that a statement throws (check.h has the rest of
 * their checks). */
#ifndef GPUMEM_TESTS_CHECK_THROWS_HPP
#define GPUMEM_TESTS_CHECK_THROWS_HPP

#include "check.h"

/* `statement` throws an E (and nothing else). */
#define CHECK_THROWS(E, statement)                                                                 \
  do {                                                                                             \
    bool check_thrown_ = false;                                                                    \
    try {                                                                                          \
      statement;                                                                                   \
    } catch (const E &) {                                                                          \
      check_thrown_ = true;                                                                        \
    } catch (...) {                                                                                \
      CHECK_FAIL_("%s threw something else than %s", #statement, #E);                              \
    }                                                                                              \
    if (!check_thrown_)                                                                            \
      CHECK_FAIL_("%s did not throw %s", #statement, #E);                                          \
  } while (0)

#endif /* GPUMEM_TESTS_CHECK_THROWS_HPP */
