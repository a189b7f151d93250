/*
 * A manager's health from C (run by tests/c_api.rs): healthy while renewals work, SUSPENDED
 * once the server stops answering (the test freezes it with SIGSTOP after READY), HEALTHY
 * again once it is continued; the wait's timeout, its refusal of a bad state, and its end at
 * shutdown; the eviction risk of a default server (none).
 *
 *   usage: health REDIS_URL
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "redis_rlock.h"

static int checks = 0;

static void expect(redis_rlock_result got, redis_rlock_result expected, const char *what, int line) {
    if (got != expected) {
        fprintf(stderr, "line %d: %s gave %d (%s), expected %d; last error: %s\n", line, what,
                (int)got, redis_rlock_result_str(got), (int)expected, redis_rlock_last_error());
        exit(1);
    }
    checks++;
}

static void expect_state(redis_rlock_health got, redis_rlock_health expected, int line) {
    if (got != expected) {
        fprintf(stderr, "line %d: health %d, expected %d\n", line, (int)got, (int)expected);
        exit(1);
    }
    checks++;
}

#define EXPECT(call, expected) expect((call), (expected), #call, __LINE__)
#define STATE(got, expected) expect_state((got), (expected), __LINE__)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REDIS_URL\n", argv[0]);
        return 2;
    }
    alarm(120);
    redis_rlock_options opts = redis_rlock_options_default();
    /* Renewed every second; a sweep to a stopped server fails after 0.5 s, with 2 s of lease
     * left. */
    opts.watchdog_timeout_ms = 3000;
    opts.response_timeout_ms = 500;
    redis_rlock_manager *m = NULL;
    EXPECT(redis_rlock_manager_new_with_options(argv[1], &opts, &m), REDIS_RLOCK_OK);

    redis_rlock_health state = REDIS_RLOCK_LOST;
    EXPECT(redis_rlock_manager_health(m, &state), REDIS_RLOCK_OK);
    STATE(state, REDIS_RLOCK_HEALTHY);
    EXPECT(redis_rlock_manager_health(m, NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_manager_health(NULL, &state), REDIS_RLOCK_INVALID_ARGUMENT);
    bool risk = true;
    EXPECT(redis_rlock_manager_eviction_risk(m, &risk), REDIS_RLOCK_OK);
    if (risk) {
        fprintf(stderr, "a default server reported an eviction risk\n");
        return 1;
    }

    /* Nothing changes: the wait ends at its timeout, the state as it was. */
    EXPECT(redis_rlock_manager_health_wait(m, REDIS_RLOCK_HEALTHY, 20, &state), REDIS_RLOCK_OK);
    STATE(state, REDIS_RLOCK_HEALTHY);
    EXPECT(redis_rlock_manager_health_wait(m, 7, 20, &state), REDIS_RLOCK_INVALID_ARGUMENT);

    redis_rlock_guard *g = NULL;
    EXPECT(redis_rlock_lock(m, "c-health", &g), REDIS_RLOCK_OK);
    printf("READY\n");
    fflush(stdout);

    /* The test stops the server now. */
    EXPECT(redis_rlock_manager_health_wait(m, REDIS_RLOCK_HEALTHY, REDIS_RLOCK_WAIT_FOREVER,
                                           &state),
           REDIS_RLOCK_OK);
    STATE(state, REDIS_RLOCK_SUSPENDED);
    printf("SUSPENDED\n");
    fflush(stdout);

    /* The test continues it. */
    EXPECT(redis_rlock_manager_health_wait(m, REDIS_RLOCK_SUSPENDED, 60000, &state),
           REDIS_RLOCK_OK);
    STATE(state, REDIS_RLOCK_HEALTHY);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_OK);

    /* A shutdown ends a wait at once. */
    redis_rlock_manager_shutdown(m);
    EXPECT(redis_rlock_manager_health_wait(m, REDIS_RLOCK_HEALTHY, REDIS_RLOCK_WAIT_FOREVER,
                                           &state),
           REDIS_RLOCK_SHUTDOWN);
    redis_rlock_manager_free(m);
    printf("health: %d checks passed\n", checks);
    return 0;
}
