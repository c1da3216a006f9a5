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

/* `statement` throws an E whose what() contains `text` (and no other std::exception). */
#define CHECK_THROWS_TEXT(E, statement, text)                                                      \
  do {                                                                                             \
    bool check_thrown_ = false;                                                                    \
    try {                                                                                          \
      statement;                                                                                   \
    } catch (const E &check_e_) {                                                                  \
      check_thrown_ = true;                                                                        \
      CHECK_CONTAINS(check_e_.what(), text);                                                       \
    } catch (const std::exception &check_e_) {                                                     \
      CHECK_FAIL_("%s threw another exception than %s: %s", #statement, #E, check_e_.what());      \
    }                                                                                              \
    if (!check_thrown_)                                                                            \
      CHECK_FAIL_("%s did not throw %s", #statement, #E);                                          \
  } while (0)

#endif /* GPUMEM_TESTS_CHECK_THROWS_HPP */
