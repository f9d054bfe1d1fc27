/* forkexec.c: forks, and the child execs this same binary in "child" mode, where it
 * burns CPU in child_work(). Used to check that samples of an exec'd child are
 * attributed and symbolized.
 *
 *   cc -O1 -g -o forkexec forkexec.c && ./forkexec
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile uint64_t sink;

__attribute__((noinline)) void child_work(void)
{
    uint64_t x = 7;
    for (uint64_t i = 0; i < 400000000ULL; i++)
        x = x * 2862933555777941757ULL + 3037000493ULL;
    sink = x;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        child_work();
        return 0;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        perror("exec");
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
