/*
 * The C API's duration limits (run by tests/c_api.rs): leases and watchdog timeouts beyond
 * the longest the library accepts (100 years) are refused with REDIS_RLOCK_INVALID_ARGUMENT,
 * promptly, and the longest accepted ones work. The bug this guards against was an endless
 * loop, so the program gives itself a minute (alarm) and dies of SIGALRM after that.
 *
 *   usage: duration_limits REDIS_URL
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_rlock.h"

/* The longest lease and watchdog timeout accepted, in ms: 100 years. */
#define MAX_LEASE_MS (UINT64_C(100) * 365 * 24 * 60 * 60 * 1000)

static int checks = 0;

static void expect(redis_rlock_result got, redis_rlock_result expected, const char *what, int line) {
    if (got != expected) {
        fprintf(stderr, "line %d: %s gave %d (%s), expected %d; last error: %s\n", line, what,
                (int)got, redis_rlock_result_str(got), (int)expected, redis_rlock_last_error());
        exit(1);
    }
    checks++;
}

static void expect_error_mentions(const char *word, int line) {
    if (strstr(redis_rlock_last_error(), word) == NULL) {
        fprintf(stderr, "line %d: the error does not mention \"%s\": %s\n", line, word,
                redis_rlock_last_error());
        exit(1);
    }
    checks++;
}

#define EXPECT(call, expected) expect((call), (expected), #call, __LINE__)
#define MENTIONS(word) expect_error_mentions((word), __LINE__)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REDIS_URL\n", argv[0]);
        return 2;
    }
    const char *url = argv[1];
    alarm(60);

    redis_rlock_options opts = redis_rlock_options_default();
    redis_rlock_manager *m = NULL;
    opts.watchdog_timeout_ms = MAX_LEASE_MS + 1;
    EXPECT(redis_rlock_manager_new_with_options(url, &opts, &m), REDIS_RLOCK_INVALID_ARGUMENT);
    MENTIONS("watchdog timeout");
    if (m != NULL) {
        fprintf(stderr, "a refused manager was returned\n");
        return 1;
    }

    opts.watchdog_timeout_ms = MAX_LEASE_MS;
    EXPECT(redis_rlock_manager_new_with_options(url, &opts, &m), REDIS_RLOCK_OK);

    redis_rlock_guard *g = NULL;
    EXPECT(redis_rlock_lock(m, "c:longest", &g), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_lock_with_lease(m, "c:longest", MAX_LEASE_MS, &g), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_OK);

    const uint64_t too_long[] = {MAX_LEASE_MS + 1, UINT64_C(1) << 52, UINT64_MAX};
    for (size_t i = 0; i < sizeof too_long / sizeof too_long[0]; i++) {
        g = NULL;
        EXPECT(redis_rlock_lock_with_lease(m, "c:longest", too_long[i], &g),
               REDIS_RLOCK_INVALID_ARGUMENT);
        MENTIONS("lease");
        if (g != NULL) {
            fprintf(stderr, "a refused lease %llu gave a guard\n", (unsigned long long)too_long[i]);
            return 1;
        }
        EXPECT(redis_rlock_try_lock_with_lease(m, "c:longest", 0, too_long[i], &g),
               REDIS_RLOCK_INVALID_ARGUMENT);
        MENTIONS("lease");
        if (g != NULL) {
            fprintf(stderr, "a refused lease %llu gave a guard\n", (unsigned long long)too_long[i]);
            return 1;
        }
    }
    redis_rlock_manager_free(m);
    printf("duration_limits: %d checks passed\n", checks);
    return 0;
}
