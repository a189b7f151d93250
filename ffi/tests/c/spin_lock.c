/*
 * The spin lock from C (run by tests/c_api.rs): taken, re-entered, refused to a second
 * manager while held (one attempt, a bounded wait, and options), seen by the plain lock's
 * inspection calls (a spin lock is stored as one), then taken by the second manager once
 * free; a NULL name is refused.
 *
 *   usage: spin_lock REDIS_URL
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

static void expect_true(bool got, const char *what, int line) {
    if (!got) {
        fprintf(stderr, "line %d: expected %s\n", line, what);
        exit(1);
    }
    checks++;
}

#define EXPECT(call, expected) expect((call), (expected), #call, __LINE__)
#define CHECK(cond) expect_true((cond), #cond, __LINE__)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REDIS_URL\n", argv[0]);
        return 2;
    }
    alarm(60);
    const char *name = "c:spin";
    redis_rlock_manager *m = NULL, *other = NULL;
    EXPECT(redis_rlock_manager_new(argv[1], &m), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_manager_new(argv[1], &other), REDIS_RLOCK_OK);

    redis_rlock_guard *held = NULL, *again = NULL, *refused = NULL;
    EXPECT(redis_rlock_spin_lock(m, name, &held), REDIS_RLOCK_OK);
    CHECK(held != NULL);
    EXPECT(redis_rlock_spin_try_lock(m, name, 0, &again), REDIS_RLOCK_OK);
    uint32_t count = 0;
    EXPECT(redis_rlock_hold_count(m, name, &count), REDIS_RLOCK_OK);
    CHECK(count == 2);
    EXPECT(redis_rlock_unlock(again), REDIS_RLOCK_OK);

    EXPECT(redis_rlock_spin_try_lock(other, name, 0, &refused), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(refused == NULL);
    EXPECT(redis_rlock_spin_try_lock(other, name, 300, &refused), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(refused == NULL);
    redis_rlock_lock_options opts = redis_rlock_lock_options_default();
    opts.wait_ms = 0;
    EXPECT(redis_rlock_spin_acquire(other, name, &opts, &refused), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(refused == NULL);
    bool locked = false;
    EXPECT(redis_rlock_is_locked(other, name, &locked), REDIS_RLOCK_OK);
    CHECK(locked);

    EXPECT(redis_rlock_unlock(held), REDIS_RLOCK_OK);
    opts.wait_ms = 5000;
    opts.fenced = true;
    redis_rlock_guard *taken = NULL;
    EXPECT(redis_rlock_spin_acquire(other, name, &opts, &taken), REDIS_RLOCK_OK);
    uint64_t token = 0;
    CHECK(redis_rlock_guard_fencing_token(taken, &token));
    CHECK(token >= 1);
    EXPECT(redis_rlock_unlock(taken), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_is_locked(m, name, &locked), REDIS_RLOCK_OK);
    CHECK(!locked);

    EXPECT(redis_rlock_spin_lock(m, NULL, &held), REDIS_RLOCK_INVALID_ARGUMENT);

    redis_rlock_manager_free(other);
    redis_rlock_manager_free(m);
    printf("spin_lock: %d checks passed\n", checks);
    return 0;
}
