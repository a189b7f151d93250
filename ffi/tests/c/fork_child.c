/*
 * A manager inherited through fork() (run by tests/c_api.rs): in the child every call on it
 * and on an inherited guard fails with REDIS_RLOCK_INVALID_ARGUMENT and a message that says to
 * create the manager in the child, and redis_rlock_manager_free and redis_rlock_guard_free
 * return normally (no abort) without releasing the parent's lock; the parent's manager and
 * guard keep working.
 *
 *   usage: fork_child REDIS_URL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_rlock.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        fprintf(stderr, "line %d: ", __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                    \
        fprintf(stderr, " (last error: %s)\n", redis_rlock_last_error());                 \
        exit(1);                                                                         \
    } while (0)

/* The child's checks; its exit code says which failed (0: none). */
static int child(redis_rlock_manager *m, redis_rlock_guard *held) {
    redis_rlock_guard *g = NULL;
    if (redis_rlock_try_lock(m, "c:fork:other", 0, &g) != REDIS_RLOCK_INVALID_ARGUMENT || g != NULL)
        return 10;
    if (strstr(redis_rlock_last_error(), "create the manager in the child") == NULL)
        return 11;
    bool locked = false;
    if (redis_rlock_is_locked(m, "c:fork:held", &locked) != REDIS_RLOCK_INVALID_ARGUMENT)
        return 12;
    /* The parent's guard: freeing it here must not release the parent's hold. */
    redis_rlock_guard_free(held);
    redis_rlock_manager_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REDIS_URL\n", argv[0]);
        return 2;
    }
    alarm(60);
    redis_rlock_manager *m = NULL;
    if (redis_rlock_manager_new(argv[1], &m) != REDIS_RLOCK_OK)
        FAIL("manager");
    redis_rlock_guard *held = NULL;
    if (redis_rlock_lock(m, "c:fork:held", &held) != REDIS_RLOCK_OK)
        FAIL("lock");

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        FAIL("fork");
    if (pid == 0)
        _exit(child(m, held));

    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        FAIL("waitpid");
    if (WIFSIGNALED(status))
        FAIL("the child died of signal %d (an abort is a double panic)", WTERMSIG(status));
    if (WEXITSTATUS(status) != 0)
        FAIL("the child's check %d failed", WEXITSTATUS(status));

    /* Still held, by this process, and the manager still works here. */
    bool locked = false;
    if (redis_rlock_is_locked(m, "c:fork:held", &locked) != REDIS_RLOCK_OK || !locked)
        FAIL("the parent's lock is still held");
    if (redis_rlock_unlock(held) != REDIS_RLOCK_OK)
        FAIL("unlock in the parent");
    redis_rlock_guard *g = NULL;
    if (redis_rlock_try_lock(m, "c:fork:other", 0, &g) != REDIS_RLOCK_OK)
        FAIL("the parent's manager keeps working");
    if (redis_rlock_unlock(g) != REDIS_RLOCK_OK)
        FAIL("unlock");
    redis_rlock_manager_free(m);
    printf("fork_child: the child was refused and freed cleanly, the parent kept its lock\n");
    return 0;
}
