// SPDX-License-Identifier: Apache-2.0
/* The main thread's time in a fork window, a known answer: the process pins itself (and so its
 * child) to one CPU, prints "ready PID", waits for "go" on stdin and forks a child that spins for
 * CHILD_MS of wall time. Meanwhile the parent spins too ("spin": it is runnable whenever the child
 * runs on their one CPU, so it waits in the run queue at least the child's CPU time) or sleeps in
 * waitpid ("sleep": off CPU). Once the child has exited it prints "child_cpu_ns N" (the child's CPU
 * time, from its own clock) and "done", idles 500 ms, and waits for a line.
 * usage: cpu_share spin|sleep CHILD_MS */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;

  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char** argv) {
  char line[64];
  cpu_set_t one;
  int fds[2];
  uint64_t child_cpu_ns = 0;
  pid_t child;
  int spin, status;

  if (argc != 3 || (strcmp(argv[1], "spin") != 0 && strcmp(argv[1], "sleep") != 0)) {
    fprintf(stderr, "usage: cpu_share spin|sleep CHILD_MS\n");
    return 2;
  }
  spin = strcmp(argv[1], "spin") == 0;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0 || pipe(fds) != 0) {
    perror("cpu_share");
    return 1;
  }
  printf("ready %d\n", getpid());
  fflush(stdout);
  if (!fgets(line, sizeof(line), stdin)) return 1;
  child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    const uint64_t until = clock_ns(CLOCK_MONOTONIC) + (uint64_t)atoi(argv[2]) * 1000000u;
    uint64_t used;

    while (clock_ns(CLOCK_MONOTONIC) < until)
      ;
    used = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (write(fds[1], &used, sizeof(used)) != sizeof(used)) _exit(1);
    _exit(0);
  }
  if (spin)
    while (waitpid(child, &status, WNOHANG) == 0)
      ;
  else
    waitpid(child, &status, 0);
  if (read(fds[0], &child_cpu_ns, sizeof(child_cpu_ns)) != sizeof(child_cpu_ns)) return 1;
  printf("child_cpu_ns %llu\ndone\n", (unsigned long long)child_cpu_ns);
  fflush(stdout);
  usleep(500000);
  if (!fgets(line, sizeof(line), stdin)) return 1;
  return 0;
}
