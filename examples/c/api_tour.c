/*
 * A tour of the whole C API: every function, and every result code that a working library
 * can return (REDIS_RLOCK_PANIC and REDIS_RLOCK_SYSTEM_ERROR need a bug or an exhausted
 * machine; their mapping is tested in Rust). Exits non-zero at the first surprise.
 *
 *   usage: api_tour HOST PORT
 */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_rlock.h"

static int checks = 0;

#define EXPECT(call, expected)                                                           \
    do {                                                                                 \
        redis_rlock_result got_ = (call);                                                 \
        if (got_ != (expected)) {                                                        \
            fprintf(stderr, "%s:%d: %s gave %d (%s), expected %d; last error: %s\n",     \
                    __FILE__, __LINE__, #call, (int)got_, redis_rlock_result_str(got_),   \
                    (int)(expected), redis_rlock_last_error());                           \
            exit(1);                                                                     \
        }                                                                                \
        checks++;                                                                        \
    } while (0)

#define CHECK(condition)                                                                 \
    do {                                                                                 \
        if (!(condition)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
            exit(1);                                                                     \
        }                                                                                \
        checks++;                                                                        \
    } while (0)

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* What another thread sees of a lock the main thread holds. */
struct other_thread {
    redis_rlock_manager *manager;
    const char *name;
    redis_rlock_guard *guard_to_release;
};

static void *look_from_another_thread(void *arg) {
    struct other_thread *t = arg;
    /* A guard may be released on another thread than the one that acquired it. */
    if (t->guard_to_release != NULL) {
        EXPECT(redis_rlock_unlock(t->guard_to_release), REDIS_RLOCK_OK);
        return NULL;
    }
    redis_rlock_guard *guard = (redis_rlock_guard *)&guard; /* must be overwritten with NULL */
    EXPECT(redis_rlock_try_lock(t->manager, t->name, 50, &guard), REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(guard == NULL);
    CHECK(strlen(redis_rlock_last_error()) > 0);
    guard = (redis_rlock_guard *)&guard;
    EXPECT(redis_rlock_try_lock_with_lease(t->manager, t->name, 0, 1000, &guard),
           REDIS_RLOCK_NOT_ACQUIRED);
    CHECK(guard == NULL);
    bool held = true;
    EXPECT(redis_rlock_is_held_by_current_thread(t->manager, t->name, &held), REDIS_RLOCK_OK);
    CHECK(!held);
    uint32_t count = 99;
    EXPECT(redis_rlock_hold_count(t->manager, t->name, &count), REDIS_RLOCK_OK);
    CHECK(count == 0);
    return NULL;
}

static void on_another_thread(redis_rlock_manager *m, const char *name, redis_rlock_guard *g) {
    struct other_thread t = {m, name, g};
    pthread_t id;
    CHECK(pthread_create(&id, NULL, look_from_another_thread, &t) == 0);
    CHECK(pthread_join(id, NULL) == 0);
}

static void strings_and_codes(void) {
    CHECK(strlen(redis_rlock_version()) > 0);
    CHECK(strcmp(redis_rlock_last_error(), "") == 0);
    for (int code = REDIS_RLOCK_OK; code <= REDIS_RLOCK_SYSTEM_ERROR; code++) {
        CHECK(strcmp(redis_rlock_result_str(code), "unknown result code") != 0);
    }
    CHECK(strcmp(redis_rlock_result_str(-1), "unknown result code") == 0);
    CHECK(REDIS_RLOCK_OK == 0 && REDIS_RLOCK_NOT_ACQUIRED == 1 && REDIS_RLOCK_NOT_HELD == 2 &&
          REDIS_RLOCK_INVALID_ARGUMENT == 3 && REDIS_RLOCK_REDIS_ERROR == 4 &&
          REDIS_RLOCK_PANIC == 5 && REDIS_RLOCK_SYSTEM_ERROR == 6);
}

static void bad_managers(void) {
    redis_rlock_manager *m = (redis_rlock_manager *)&m;
    EXPECT(redis_rlock_manager_new(NULL, &m), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(m == NULL);
    CHECK(strstr(redis_rlock_last_error(), "url is NULL") != NULL);
    EXPECT(redis_rlock_manager_new("redis://127.0.0.1/", NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_manager_new("not a url", &m), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(m == NULL);
    EXPECT(redis_rlock_manager_new("redis://\xff\xfe/", &m), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(strstr(redis_rlock_last_error(), "UTF-8") != NULL);
    /* Nothing listens on port 1: refused at once. */
    EXPECT(redis_rlock_manager_new("redis://127.0.0.1:1/", &m), REDIS_RLOCK_REDIS_ERROR);
    CHECK(m == NULL);

    redis_rlock_options opts = redis_rlock_options_default();
    CHECK(opts.watchdog_timeout_ms == 30000 && opts.pool_size == 8);
    CHECK(opts.connect_timeout_ms == 5000 && opts.response_timeout_ms == 3000);
    opts.watchdog_timeout_ms = 2; /* too short to renew every third of it */
    EXPECT(redis_rlock_manager_new_with_options("redis://127.0.0.1:1/", &opts, &m),
           REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(strstr(redis_rlock_last_error(), "watchdog timeout") != NULL);
    redis_rlock_manager_free(NULL);
}

static void bad_arguments(redis_rlock_manager *m) {
    redis_rlock_guard *g = (redis_rlock_guard *)&g;
    EXPECT(redis_rlock_lock(NULL, "tour:x", &g), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(g == NULL);
    EXPECT(redis_rlock_lock(m, NULL, &g), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_lock(m, "tour:x", NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_lock(m, "", &g), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_lock(m, "tour:\xc3\x28", &g), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(strstr(redis_rlock_last_error(), "UTF-8") != NULL);
    EXPECT(redis_rlock_lock_with_lease(m, "tour:x", 0, &g), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(strstr(redis_rlock_last_error(), "lease") != NULL);
    EXPECT(redis_rlock_try_lock_with_lease(m, "tour:x", 0, UINT64_MAX, &g),
           REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_try_lock(m, "tour:x", UINT64_MAX, &g), REDIS_RLOCK_INVALID_ARGUMENT);
    bool flag;
    uint32_t count;
    uint64_t ttl;
    EXPECT(redis_rlock_is_locked(m, "tour:x", NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_is_locked(NULL, "tour:x", &flag), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_is_held_by_current_thread(m, NULL, &flag), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_hold_count(m, "tour:x", NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_hold_count(m, "", &count), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_remaining_ttl(m, "tour:x", NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_remaining_ttl(NULL, "tour:x", &ttl), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_force_unlock(m, NULL, &flag), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_unlock(NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    redis_rlock_guard_free(NULL);
    CHECK(!redis_rlock_guard_is_lost(NULL));
}

static void reentrant_lock(redis_rlock_manager *m) {
    const char *name = "tour:reentrant";
    redis_rlock_guard *outer = NULL, *inner = NULL;
    EXPECT(redis_rlock_lock(m, name, &outer), REDIS_RLOCK_OK);
    CHECK(outer != NULL);
    EXPECT(redis_rlock_lock(m, name, &inner), REDIS_RLOCK_OK);
    uint32_t count = 0;
    EXPECT(redis_rlock_hold_count(m, name, &count), REDIS_RLOCK_OK);
    CHECK(count == 2);
    bool flag = false;
    EXPECT(redis_rlock_is_locked(m, name, &flag), REDIS_RLOCK_OK);
    CHECK(flag);
    EXPECT(redis_rlock_is_held_by_current_thread(m, name, &flag), REDIS_RLOCK_OK);
    CHECK(flag);
    uint64_t ttl = 0;
    EXPECT(redis_rlock_remaining_ttl(m, name, &ttl), REDIS_RLOCK_OK);
    CHECK(ttl > 0 && ttl <= 30000);
    CHECK(!redis_rlock_guard_is_lost(outer));

    on_another_thread(m, name, NULL);

    EXPECT(redis_rlock_unlock(inner), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_hold_count(m, name, &count), REDIS_RLOCK_OK);
    CHECK(count == 1);
    /* The last hold, released by another thread. */
    on_another_thread(m, name, outer);
    EXPECT(redis_rlock_is_locked(m, name, &flag), REDIS_RLOCK_OK);
    CHECK(!flag);
    EXPECT(redis_rlock_remaining_ttl(m, name, &ttl), REDIS_RLOCK_OK);
    CHECK(ttl == 0);
}

static void leases(redis_rlock_manager *m) {
    redis_rlock_guard *g = NULL;
    bool flag = true;
    EXPECT(redis_rlock_lock_with_lease(m, "tour:lease", 100, &g), REDIS_RLOCK_OK);
    CHECK(!redis_rlock_guard_is_lost(g));
    sleep_ms(400);
    CHECK(redis_rlock_guard_is_lost(g)); /* the fixed lease is over: known without I/O */
    EXPECT(redis_rlock_is_locked(m, "tour:lease", &flag), REDIS_RLOCK_OK);
    CHECK(!flag);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_NOT_HELD);
    CHECK(strstr(redis_rlock_last_error(), "not held") != NULL);

    EXPECT(redis_rlock_try_lock_with_lease(m, "tour:lease", 0, 5000, &g), REDIS_RLOCK_OK);
    uint64_t ttl = 0;
    EXPECT(redis_rlock_remaining_ttl(m, "tour:lease", &ttl), REDIS_RLOCK_OK);
    CHECK(ttl > 0 && ttl <= 5000);
    redis_rlock_guard_free(g); /* releases */
    EXPECT(redis_rlock_is_locked(m, "tour:lease", &flag), REDIS_RLOCK_OK);
    CHECK(!flag);
}

static void force_unlock(redis_rlock_manager *m) {
    redis_rlock_guard *g = NULL;
    bool released = false;
    EXPECT(redis_rlock_try_lock(m, "tour:force", 0, &g), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_force_unlock(m, "tour:force", &released), REDIS_RLOCK_OK);
    CHECK(released);
    EXPECT(redis_rlock_force_unlock(m, "tour:force", &released), REDIS_RLOCK_OK);
    CHECK(!released);
    EXPECT(redis_rlock_force_unlock(m, "tour:force", NULL), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_NOT_HELD);
}

static void fencing(redis_rlock_manager *m) {
    redis_rlock_guard *first = NULL, *second = NULL, *plain = NULL;
    uint64_t t1 = 0, t2 = 0, unchanged = 42;
    EXPECT(redis_rlock_lock_fenced(m, "tour:fenced", &first), REDIS_RLOCK_OK);
    CHECK(redis_rlock_guard_fencing_token(first, &t1));
    EXPECT(redis_rlock_unlock(first), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_try_lock_fenced(m, "tour:fenced", 100, &second), REDIS_RLOCK_OK);
    CHECK(redis_rlock_guard_fencing_token(second, &t2));
    CHECK(t2 > t1);
    CHECK(!redis_rlock_guard_fencing_token(second, NULL));
    CHECK(!redis_rlock_guard_fencing_token(NULL, &t2));
    EXPECT(redis_rlock_lock(m, "tour:unfenced", &plain), REDIS_RLOCK_OK);
    CHECK(!redis_rlock_guard_fencing_token(plain, &unchanged));
    CHECK(unchanged == 42);
    redis_rlock_guard_free(plain);
    redis_rlock_guard_free(second);
}

static void stats(redis_rlock_manager *m) {
    redis_rlock_stats before, after;
    memset(&before, 0, sizeof before);
    EXPECT(redis_rlock_manager_stats(NULL, &before), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_manager_stats(m, NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_manager_stats(m, &before), REDIS_RLOCK_OK);
    /* The tour so far locked and unlocked through this manager, on this thread alone. */
    CHECK(before.acquisitions >= 1);
    CHECK(before.round_trips >= 1 && before.commands >= before.round_trips);
    redis_rlock_guard *g = NULL;
    EXPECT(redis_rlock_lock(m, "tour:stats", &g), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_manager_stats(m, &after), REDIS_RLOCK_OK);
    CHECK(after.acquisitions == before.acquisitions + 1);
    CHECK(after.round_trips >= before.round_trips + 2); /* the acquire and the release */
    CHECK(after.waits == before.waits && after.wait_time_us == before.wait_time_us);
}

static void wrong_type(redis_rlock_manager *m, const char *host, int port) {
    redisContext *redis = redisConnect(host, port);
    CHECK(redis != NULL && redis->err == 0);
    freeReplyObject(redisCommand(redis, "SET tour:string not-a-lock"));
    redis_rlock_guard *g = NULL;
    bool flag;
    EXPECT(redis_rlock_lock(m, "tour:string", &g), REDIS_RLOCK_REDIS_ERROR);
    CHECK(g == NULL);
    CHECK(strstr(redis_rlock_last_error(), "not a lock") != NULL);
    EXPECT(redis_rlock_force_unlock(m, "tour:string", &flag), REDIS_RLOCK_REDIS_ERROR);
    redisReply *reply = redisCommand(redis, "GET tour:string");
    CHECK(reply != NULL && reply->type == REDIS_REPLY_STRING &&
          strcmp(reply->str, "not-a-lock") == 0);
    freeReplyObject(reply);
    redisFree(redis);
}

/* A thread that takes a semaphore's permit (waiting for it) and gives it back. */
static void *take_a_permit(void *arg) {
    redis_rlock_manager *m = arg;
    EXPECT(redis_rlock_semaphore_acquire(m, "tour:semaphore", 1), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_semaphore_release(m, "tour:semaphore", 1), REDIS_RLOCK_OK);
    return NULL;
}

static void semaphores(redis_rlock_manager *m, const char *host, int port) {
    const char *name = "tour:semaphore";
    bool flag = false;
    uint64_t free_permits = 99;
    EXPECT(redis_rlock_semaphore_available_permits(m, name, &free_permits), REDIS_RLOCK_OK);
    CHECK(free_permits == 0); /* it does not exist yet */
    EXPECT(redis_rlock_semaphore_try_set_permits(m, name, 2, &flag), REDIS_RLOCK_OK);
    CHECK(flag);
    EXPECT(redis_rlock_semaphore_try_set_permits(m, name, 5, &flag), REDIS_RLOCK_OK);
    CHECK(!flag); /* it exists: the count is kept */
    EXPECT(redis_rlock_semaphore_acquire(m, name, 2), REDIS_RLOCK_OK);
    flag = true;
    EXPECT(redis_rlock_semaphore_try_acquire(m, name, 1, 50, &flag), REDIS_RLOCK_OK);
    CHECK(!flag); /* the wait passed: still REDIS_RLOCK_OK */

    /* Another thread waits for a permit; one released here lets it through. Permits have no
     * owner, so whoever took them, anyone may give them back. */
    pthread_t id;
    CHECK(pthread_create(&id, NULL, take_a_permit, m) == 0);
    EXPECT(redis_rlock_semaphore_release(m, name, 1), REDIS_RLOCK_OK);
    CHECK(pthread_join(id, NULL) == 0);
    EXPECT(redis_rlock_semaphore_available_permits(m, name, &free_permits), REDIS_RLOCK_OK);
    CHECK(free_permits == 1);
    EXPECT(redis_rlock_semaphore_try_acquire(m, name, 1, 1000, &flag), REDIS_RLOCK_OK);
    CHECK(flag);
    EXPECT(redis_rlock_semaphore_release(m, name, 2), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_semaphore_available_permits(m, name, &free_permits), REDIS_RLOCK_OK);
    CHECK(free_permits == 2);

    /* Refused before anything is sent. */
    EXPECT(redis_rlock_semaphore_acquire(NULL, name, 1), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_release(m, NULL, 1), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_acquire(m, name, 0), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(strstr(redis_rlock_last_error(), "permits") != NULL);
    EXPECT(redis_rlock_semaphore_try_acquire(m, name, 1, 0, NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_try_acquire(m, name, 1, UINT64_MAX, &flag),
           REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_try_set_permits(m, name, 1, NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_try_set_permits(m, "", 1, &flag), REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_release(m, name, REDIS_RLOCK_SEMAPHORE_MAX_PERMITS + 1u),
           REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_available_permits(m, name, NULL), REDIS_RLOCK_INVALID_ARGUMENT);
    /* Past Redisson's int range: refused by the server, nothing changed. */
    EXPECT(redis_rlock_semaphore_release(m, name, REDIS_RLOCK_SEMAPHORE_MAX_PERMITS),
           REDIS_RLOCK_INVALID_ARGUMENT);
    EXPECT(redis_rlock_semaphore_available_permits(m, name, &free_permits), REDIS_RLOCK_OK);
    CHECK(free_permits == 2);

    /* A key that is not a semaphore is left alone. */
    redisContext *redis = redisConnect(host, port);
    CHECK(redis != NULL && redis->err == 0);
    freeReplyObject(redisCommand(redis, "HSET tour:semaphore-hash field value"));
    EXPECT(redis_rlock_semaphore_release(m, "tour:semaphore-hash", 1), REDIS_RLOCK_REDIS_ERROR);
    EXPECT(redis_rlock_semaphore_available_permits(m, "tour:semaphore-hash", &free_permits),
           REDIS_RLOCK_REDIS_ERROR);
    redisReply *reply = redisCommand(redis, "HGET tour:semaphore-hash field");
    CHECK(reply != NULL && reply->type == REDIS_REPLY_STRING && strcmp(reply->str, "value") == 0);
    freeReplyObject(reply);
    redisFree(redis);
}

static void watchdog_and_lifetime(const char *url) {
    redis_rlock_options opts = redis_rlock_options_default();
    opts.watchdog_timeout_ms = 600;
    opts.pool_size = 2;
    redis_rlock_manager *m = NULL;
    EXPECT(redis_rlock_manager_new_with_options(url, &opts, &m), REDIS_RLOCK_OK);
    redis_rlock_guard *g = NULL;
    EXPECT(redis_rlock_lock(m, "tour:watchdog", &g), REDIS_RLOCK_OK);
    sleep_ms(1500); /* well past the 600 ms lease: only renewals keep it */
    bool flag = false;
    EXPECT(redis_rlock_is_held_by_current_thread(m, "tour:watchdog", &flag), REDIS_RLOCK_OK);
    CHECK(flag);
    CHECK(!redis_rlock_guard_is_lost(g));
    /* A guard outlives its manager handle and still releases. */
    redis_rlock_manager_free(m);
    EXPECT(redis_rlock_unlock(g), REDIS_RLOCK_OK);
}

/* The fair lock and the read-write lock hand out the same guards as the plain lock. */
static void other_kinds(redis_rlock_manager *m) {
    redis_rlock_guard *fair = NULL, *again = NULL, *r1 = NULL, *r2 = NULL, *w = NULL;
    EXPECT(redis_rlock_fair_lock(m, "tour:fair", &fair), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_fair_try_lock(m, "tour:fair", 0, &again), REDIS_RLOCK_OK); /* re-entered */
    EXPECT(redis_rlock_unlock(again), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_unlock(fair), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_fair_lock(NULL, "tour:fair", &fair), REDIS_RLOCK_INVALID_ARGUMENT);

    EXPECT(redis_rlock_read_lock(m, "tour:rw", &r1), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_read_try_lock(m, "tour:rw", 0, &r2), REDIS_RLOCK_OK); /* reads share */
    /* A reader asking for the write lock would wait for itself: refused. */
    EXPECT(redis_rlock_write_try_lock(m, "tour:rw", 50, &w), REDIS_RLOCK_INVALID_ARGUMENT);
    CHECK(w == NULL);
    EXPECT(redis_rlock_unlock(r2), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_unlock(r1), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_write_lock(m, "tour:rw", &w), REDIS_RLOCK_OK);
    EXPECT(redis_rlock_read_try_lock(m, "tour:rw", 0, &r1), REDIS_RLOCK_OK); /* the writer reads */
    redis_rlock_guard_free(r1);
    EXPECT(redis_rlock_unlock(w), REDIS_RLOCK_OK);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
        return 2;
    }
    char url[256];
    snprintf(url, sizeof url, "redis://%s:%s/", argv[1], argv[2]);

    strings_and_codes();
    bad_managers();
    redis_rlock_manager *m = NULL;
    EXPECT(redis_rlock_manager_new(url, &m), REDIS_RLOCK_OK);
    bad_arguments(m);
    reentrant_lock(m);
    leases(m);
    force_unlock(m);
    fencing(m);
    other_kinds(m);
    stats(m);
    wrong_type(m, argv[1], atoi(argv[2]));
    semaphores(m, argv[1], atoi(argv[2]));
    redis_rlock_manager_free(m);
    watchdog_and_lifetime(url);

    printf("api_tour: %d checks passed\n", checks);
    return 0;
}
