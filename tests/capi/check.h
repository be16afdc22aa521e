/* Shared by the C API tests (plain C99): CHECK counts a condition, CHECK_STATUS a call's status together with
 * a part of fk_last_error()'s message (which must be non-empty). g_checks / g_failures feed the summary line. */
#ifndef FLASHKIT_TESTS_CAPI_CHECK_H
#define FLASHKIT_TESTS_CAPI_CHECK_H
#include <stdio.h>
#include <string.h>

#include "flashkit/flashkit.h"

static int g_checks = 0;
static int g_failures = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    ++g_checks;                                                       \
    if (!(cond)) {                                                    \
      ++g_failures;                                                   \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
    }                                                                 \
  } while (0)

/* The call returned `want` and fk_last_error() contains `part`. */
static void check_status(fk_status got, fk_status want, const char* part, const char* what, int line) {
  const char* err = fk_last_error();
  ++g_checks;
  if (got != want || err == NULL || err[0] == 0 || strstr(err, part) == NULL) {
    ++g_failures;
    fprintf(stderr, "FAIL line %d: %s: status %d (%s), want %d (%s), message '%s' should contain '%s'\n", line, what,
            (int)got, fk_status_name(got), (int)want, fk_status_name(want), err ? err : "(null)", part);
  }
}
#define CHECK_STATUS(call, want, part) check_status((call), (want), (part), #call, __LINE__)

#endif
