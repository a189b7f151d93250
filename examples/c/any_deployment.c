/*
 * One lock through any deployment the URL names: a single server (redis://host:port/), a
 * Sentinel-watched master (redis-sentinel://host1:26379,host2:26379/0#mymaster) or a Redis
 * Cluster (redis-cluster://host1:7000,host2:7001). The C API takes the same URL forms as
 * LockManager::new; nothing else changes.
 *
 *   usage: any_deployment URL NAME
 */
#include <stdint.h>
#include <stdio.h>

#include "redis_rlock.h"

static int fail(const char *what, redis_rlock_result result) {
    fprintf(stderr, "%s: %s (%s)\n", what, redis_rlock_result_str(result), redis_rlock_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL NAME\n", argv[0]);
        return 2;
    }
    redis_rlock_manager *m = NULL;
    redis_rlock_result r = redis_rlock_manager_new(argv[1], &m);
    if (r != REDIS_RLOCK_OK) {
        return fail("redis_rlock_manager_new", r);
    }
    redis_rlock_guard *outer = NULL;
    redis_rlock_guard *inner = NULL;
    if ((r = redis_rlock_lock(m, argv[2], &outer)) != REDIS_RLOCK_OK) {
        return fail("redis_rlock_lock", r);
    }
    if ((r = redis_rlock_lock(m, argv[2], &inner)) != REDIS_RLOCK_OK) {
        return fail("redis_rlock_lock (re-entered)", r);
    }
    uint32_t holds = 0;
    if ((r = redis_rlock_hold_count(m, argv[2], &holds)) != REDIS_RLOCK_OK) {
        return fail("redis_rlock_hold_count", r);
    }
    if ((r = redis_rlock_unlock(inner)) != REDIS_RLOCK_OK) {
        return fail("redis_rlock_unlock (inner)", r);
    }
    if ((r = redis_rlock_unlock(outer)) != REDIS_RLOCK_OK) {
        return fail("redis_rlock_unlock (outer)", r);
    }
    bool locked = true;
    if ((r = redis_rlock_is_locked(m, argv[2], &locked)) != REDIS_RLOCK_OK) {
        return fail("redis_rlock_is_locked", r);
    }
    redis_rlock_manager_free(m);
    printf("any_deployment: %s held %u times, then %s\n", argv[2], (unsigned)holds,
           locked ? "still locked" : "free");
    return 0;
}
