/*
 * The string lock (redis-py's format) from C (run by tests/c_api.rs): taken, re-entered (one
 * token in the key, two holds counted here), refused to a second manager while held (one
 * attempt, a bounded wait, and options), seen by its own inspection calls, fencing refused,
 * taken by the second manager once free, force-unlocked; a NULL name is refused.
 *
 *   usage: string_lock REDIS_URL
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
    const char *name = "c:string";
    redis_rlock_manager *m = NULL, *other = NULL;
    EXPECT(redis_rlock_manager_new(argv[1], &m), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_manager_new(argv[1], &other), REDIS_RLOCK_OK);

    redis_rlock_guard *held = NULL, *again = NULL, *refused = NULL;
    EXPECT(redis_rlock_string_lock(m, name, &held), REDIS_RLOCK_OK);
    CHECK(held != NULL);
    EXPECT(redis_rlock_string_try_lock(m, name, 0, &again), REDIS_RLOCK_OK);
    uint32_t count = 0;
    EXPECT(redis_rlock_string_hold_count(m, name, &count), REDIS_RLOCK_OK);
    CHECK(count == 2);
    bool mine = false;
    EXPECT(redis_rlock_string_is_held_by_current_thread(m, name, &mine), REDIS_RLOCK_OK);
    CHECK(mine);
    uint64_t ttl = 0;
    EXPECT(redis_rlock_string_remaining_ttl(m, name, &ttl), REDIS_RLOCK_OK);
    CHECK(ttl > 0);
    EXPECT(redis_rlock_unlock(again), REDIS_RLOCK_OK);
    /* The plain lock's calls read a hash: the string is not one. */
    bool locked = false;
    EXPECT(redis_rlock_is_locked(m, name, &locked), REDIS_RLOCK_REDIS_ERROR);

    EXPECT(redis_rlock_string_try_lock(other, name, 0, &refused), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(refused == NULL);
    EXPECT(redis_rlock_string_try_lock(other, name, 300, &refused), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(refused == NULL);
    redis_rlock_lock_options opts = redis_rlock_lock_options_default();
    opts.wait_ms = 0;
    EXPECT(redis_rlock_string_acquire(other, name, &opts, &refused), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(refused == NULL);
    EXPECT(redis_rlock_string_is_locked(other, name, &locked), REDIS_RLOCK_OK);
    CHECK(locked);
    EXPECT(redis_rlock_string_is_held_by_current_thread(other, name, &mine), REDIS_RLOCK_OK);
    CHECK(!mine);
    opts.fenced = true;
    EXPECT(redis_rlock_string_acquire(other, name, &opts, &refused), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(refused == NULL);
    opts.fenced = false;

    EXPECT(redis_rlock_unlock(held), REDIS_RLOCK_OK);
    opts.wait_ms = 5000;
    redis_rlock_guard *taken = NULL;
    EXPECT(redis_rlock_string_acquire(other, name, &opts, &taken), REDIS_RLOCK_OK);
    bool released = false;
    EXPECT(redis_rlock_string_force_unlock(m, name, &released), REDIS_RLOCK_OK);
    CHECK(released);
    EXPECT(redis_rlock_string_is_locked(m, name, &locked), REDIS_RLOCK_OK);
    CHECK(!locked);
    EXPECT(redis_rlock_unlock(taken), REDIS_RLOCK_NOT_HELD);
    EXPECT(redis_rlock_string_force_unlock(m, name, NULL), REDIS_RLOCK_OK);

    EXPECT(redis_rlock_string_lock(m, NULL, &held), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_string_hold_count(m, name, NULL), REDIS_RLOCK_INVALID_ARGUMENT);

    redis_rlock_manager_free(other);
    redis_rlock_manager_free(m);
    printf("string_lock: %d checks passed\n", checks);
    return 0;
}
