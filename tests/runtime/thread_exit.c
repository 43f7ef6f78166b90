// SPDX-License-Identifier: Apache-2.0
/* Forks N children, one after the other; each runs THREADS threads that end together (every thread,
 * the main one included, calls the exit system call at the same moment, so the thread group dies
 * with several threads in do_exit at once). After "go" on stdin; prints "ready PID" first and
 * "done" after the last child is reaped, then waits for a line.
 * usage: thread_exit N THREADS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int ready_threads;
static atomic_int go;

static void *thread_main(void *arg)
{
	(void)arg;
	atomic_fetch_add(&ready_threads, 1);
	while (!atomic_load(&go))
		;
	syscall(SYS_exit, 0);
	return NULL;
}

static void child(int threads)
{
	pthread_t t;

	for (int i = 1; i < threads; i++)
		if (pthread_create(&t, NULL, thread_main, NULL))
			_exit(1);
	while (atomic_load(&ready_threads) < threads - 1)
		;
	atomic_store(&go, 1);
	/* The main thread ends like the others: SYS_exit, not exit_group. */
	syscall(SYS_exit, 0);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	int threads = argc > 2 ? atoi(argv[2]) : 4;
	char line[16];

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (int i = 0; i < n; i++) {
		pid_t c = fork();
		if (c == 0)
			child(threads);
		if (c < 0)
			return 1;
		waitpid(c, NULL, 0);
	}
	printf("done\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 0;
	return 0;
}
