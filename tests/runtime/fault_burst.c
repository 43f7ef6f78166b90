// SPDX-License-Identifier: Apache-2.0
/* A known burst of write faults on present pages, as fast as the machine takes them: maps N pages,
 * populates them, forks a child that exits at once (so every page table entry of the region is left
 * write-protected), and after "go" on stdin writes one byte to each page from T threads. Each write is
 * one fault that reuses its page (nothing shares it any more, so nothing is copied): the cheapest
 * write fault there is, the way to reach millions per second on a small machine.
 *
 * usage: fault_burst PAGES THREADS. Prints "ready PID", then "faults N ns D" (the writers' wall
 * time) and "done" before exiting. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define MAX_THREADS 64

static char *region;
static size_t pages;
static long threads;

static void *writer(void *arg)
{
	long t = (long)arg;
	size_t first = pages * t / threads, last = pages * (t + 1) / threads;

	for (size_t i = first; i < last; i++)
		region[i * PAGE] = 2;
	return NULL;
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	pthread_t tid[MAX_THREADS];
	char line[16];

	if (argc < 3) {
		fprintf(stderr, "usage: %s PAGES THREADS\n", argv[0]);
		return 2;
	}
	pages = strtoul(argv[1], NULL, 10);
	threads = strtol(argv[2], NULL, 10);
	if (pages == 0 || threads < 1 || threads > MAX_THREADS) {
		fprintf(stderr, "%s: PAGES must be > 0 and THREADS within 1..%d\n", argv[0], MAX_THREADS);
		return 2;
	}
	region = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* 4 KiB pages whatever the THP mode: a huge PMD would take one fault for 512 pages. */
	madvise(region, pages * PAGE, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < pages; i++)
		region[i * PAGE] = 1;
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0)
		_exit(0);
	waitpid(child, NULL, 0);

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 1;
	long long t0 = now_ns();
	for (long t = 0; t < threads; t++)
		if (pthread_create(&tid[t], NULL, writer, (void *)t) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	for (long t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	printf("faults %zu ns %lld\n", pages, now_ns() - t0);
	printf("done\n");
	fflush(stdout);
	return 0;
}
