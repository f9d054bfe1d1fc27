/* runstat.c: run one command and report its own resource usage precisely.
 *
 * Like `/usr/bin/time -f "%U %S %e %M"`, but with microsecond CPU times (time(1) prints
 * hundredths) and an optional deadline: with -t SECONDS the command is sent SIGNAL (default
 * SIGINT) after that many seconds, which is how an attached recorder (`record -p PID`) is
 * stopped. The numbers come from wait4() on the command alone, so they cover the command and
 * the children it waited for, nothing else (an attached-to workload is not its child).
 *
 *   runstat [-t SECONDS] [-s SIGNAL] [-o FILE] -- CMD ARGS...
 *
 * Appends one line to FILE (default: stderr):
 *   user_us sys_us wall_us maxrss_kib exit_status
 * where exit_status is the exit code, or 128+signal if the command was killed by a signal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double limit = 0;
    int sig = SIGINT;
    const char *out = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "+t:s:o:")) != -1) {
        switch (opt) {
        case 't': limit = atof(optarg); break;
        case 's': sig = atoi(optarg); break;
        case 'o': out = optarg; break;
        default:
            fprintf(stderr, "usage: runstat [-t SECONDS] [-s SIGNAL] [-o FILE] -- CMD...\n");
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "runstat: no command\n");
        return 2;
    }
    double start = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("runstat: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "runstat: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    int signalled = 0;
    for (;;) {
        pid_t r = wait4(pid, &status, limit > 0 && !signalled ? WNOHANG : 0, &ru);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            perror("runstat: wait4");
            return 2;
        }
        if (r == 0) {
            if (now_s() - start >= limit) {
                kill(pid, sig);
                signalled = 1;
            } else {
                usleep(2000);
            }
        }
    }
    double wall = now_s() - start;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *f = out ? fopen(out, "a") : stderr;
    if (!f) {
        perror("runstat: output file");
        return 2;
    }
    fprintf(f, "%ld %ld %ld %ld %d\n",
            (long)ru.ru_utime.tv_sec * 1000000L + (long)ru.ru_utime.tv_usec,
            (long)ru.ru_stime.tv_sec * 1000000L + (long)ru.ru_stime.tv_usec,
            (long)(wall * 1e6), (long)ru.ru_maxrss, code);
    if (out)
        fclose(f);
    return code;
}
