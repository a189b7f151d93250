/*
 * Several processes, each with several threads, increment one counter in Redis with a
 * non-atomic GET then SET, under one redis-rlock lock. Without mutual exclusion increments
 * get lost; with it the counter ends exact.
 *
 *   usage: counter HOST PORT PROCESSES THREADS ITERATIONS
 *
 * Prints "counter=N expected=N" and exits 0 when they match.
 */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_rlock.h"

static const char *const LOCK_NAME = "c-example:counter-lock";
static const char *const COUNTER_KEY = "c-example:counter";

struct worker {
    redis_rlock_manager *manager;
    const char *host;
    int port;
    long iterations;
    int failed;
};

static redisContext *connect_redis(const char *host, int port) {
    redisContext *redis = redisConnect(host, port);
    if (redis == NULL || redis->err) {
        fprintf(stderr, "cannot connect to %s:%d: %s\n", host, port,
                redis ? redis->errstr : "out of memory");
        redisFree(redis);
        return NULL;
    }
    return redis;
}

/* One non-atomic increment: another client between the GET and the SET would lose one. */
static int increment(redisContext *redis) {
    redisReply *reply = redisCommand(redis, "GET %s", COUNTER_KEY);
    if (reply == NULL) {
        return -1;
    }
    long value = reply->type == REDIS_REPLY_STRING ? atol(reply->str) : 0;
    freeReplyObject(reply);
    reply = redisCommand(redis, "SET %s %ld", COUNTER_KEY, value + 1);
    if (reply == NULL) {
        return -1;
    }
    freeReplyObject(reply);
    return 0;
}

static void *work(void *arg) {
    struct worker *w = arg;
    redisContext *redis = connect_redis(w->host, w->port);
    if (redis == NULL) {
        w->failed = 1;
        return NULL;
    }
    for (long i = 0; i < w->iterations && !w->failed; i++) {
        redis_rlock_guard *guard = NULL;
        redis_rlock_result rc = redis_rlock_lock(w->manager, LOCK_NAME, &guard);
        if (rc != REDIS_RLOCK_OK) {
            fprintf(stderr, "lock: %s\n", redis_rlock_last_error());
            w->failed = 1;
            break;
        }
        if (increment(redis) != 0) {
            fprintf(stderr, "increment: %s\n", redis->errstr);
            w->failed = 1;
        }
        rc = redis_rlock_unlock(guard); /* frees the guard whatever the result */
        if (rc != REDIS_RLOCK_OK) {
            fprintf(stderr, "unlock: %s\n", redis_rlock_last_error());
            w->failed = 1;
        }
    }
    redisFree(redis);
    return NULL;
}

/* One process: a manager shared by all its threads. Returns the process's exit status. */
static int run_process(const char *host, int port, int threads, long iterations) {
    char url[256];
    snprintf(url, sizeof url, "redis://%s:%d/", host, port);
    redis_rlock_manager *manager = NULL;
    if (redis_rlock_manager_new(url, &manager) != REDIS_RLOCK_OK) {
        fprintf(stderr, "manager: %s\n", redis_rlock_last_error());
        return 1;
    }
    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    int failed = workers == NULL || ids == NULL;
    int started = 0;
    for (; !failed && started < threads; started++) {
        workers[started] = (struct worker){manager, host, port, iterations, 0};
        if (pthread_create(&ids[started], NULL, work, &workers[started]) != 0) {
            failed = 1;
            break;
        }
    }
    for (int t = 0; t < started; t++) {
        pthread_join(ids[t], NULL);
        failed |= workers[t].failed;
    }
    free(workers);
    free(ids);
    redis_rlock_manager_free(manager);
    return failed;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST PORT PROCESSES THREADS ITERATIONS\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    int processes = atoi(argv[3]);
    int threads = atoi(argv[4]);
    long iterations = atol(argv[5]);
    if (port <= 0 || processes <= 0 || threads <= 0 || iterations <= 0) {
        fprintf(stderr, "PORT, PROCESSES, THREADS and ITERATIONS must be positive\n");
        return 2;
    }

    redisContext *redis = connect_redis(host, port);
    if (redis == NULL) {
        return 1;
    }
    freeReplyObject(redisCommand(redis, "DEL %s", COUNTER_KEY));

    /* Fork before any manager exists: a manager's threads do not survive fork(). */
    int failed = 0;
    for (int p = 0; p < processes; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            failed = 1;
            break;
        }
        if (pid == 0) {
            redisFree(redis);
            exit(run_process(host, port, threads, iterations));
        }
    }
    int status;
    while (wait(&status) > 0) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed = 1;
        }
    }

    redisReply *reply = redisCommand(redis, "GET %s", COUNTER_KEY);
    long counter = reply && reply->type == REDIS_REPLY_STRING ? atol(reply->str) : -1;
    freeReplyObject(reply);
    redisFree(redis);
    long expected = (long)processes * threads * iterations;
    printf("counter=%ld expected=%ld\n", counter, expected);
    return failed || counter != expected;
}
