// SPDX-License-Identifier: Apache-2.0
/* A workload whose answer is known: maps N pages, populates them, waits for "go" on stdin, forks a
 * child that sleeps CHILD_MS (and longer, until the parent's writes are done) and exits without writing, and while the
 * child lives writes one byte to each of the N pages in the parent: exactly N copy-on-write faults on present pages
 * (plus the handful of stack and libc pages the parent touches after fork).
 *
 * usage: dirty_after_fork PAGES CHILD_MS [thp|4k|noadvice] [timing] [read] [threads=T] [linger=MS]
 * With "thp" the region is 2 MiB aligned and madvise(MADV_HUGEPAGE)d. With "read" the parent does
 * not write the pages itself: it read()s one page from /dev/zero into each, so the kernel takes each
 * copy-on-write fault in kernel mode (copy_to_user), as when Redis reads a query into a buffer it
 * allocated before the fork. Prints "ready PID" when populated, "child_ms X" (fork to reap, as the
 * parent saw it) and "done" when the child has been reaped. With "timing" it also prints "dirty_ns N",
 * the CLOCK_MONOTONIC time of the parent's dirty loop, as soon as the loop ends, and first touches
 * and frees as much memory as the copies will take, then says "warm" and waits for a second line
 * before it forks (tests/bench/bpf_cost.sh). With "threads=T" (T > 1) T threads of the parent, started
 * before the fork and waiting on a barrier, each dirty a contiguous share of the pages after it: the
 * same N faults, taken on as many CPUs at once as the machine gives. With "linger=MS" the child lives
 * MS more after the parent's last write, so that a reader of the counters that runs late on a busy
 * host still reads every copy inside the child's life (timeline_test.cpp). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define HUGE (2UL << 20)
#define MAX_THREADS 256

static char *buf;
static size_t pages;
static long threads = 1;
static long linger_ms;
static pthread_barrier_t start_line;

/* One writer's share of the pages: [pages * t / threads, pages * (t + 1) / threads). */
static void dirty_share(long t)
{
	for (size_t i = pages * t / threads; i < pages * (t + 1) / threads; i++)
		buf[i * PAGE] = 2;
}

static void *writer(void *arg)
{
	pthread_barrier_wait(&start_line);
	dirty_share((long)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s PAGES CHILD_MS [thp]\n", argv[0]);
		return 2;
	}
	pages = strtoul(argv[1], NULL, 10);
	long child_ms = strtol(argv[2], NULL, 10);
        int thp = 0, timing = 0, by_read = 0, advice = 1;
        for (int i = 3; i < argc; i++) {
		thp |= strcmp(argv[i], "thp") == 0;
                advice &= strcmp(argv[i], "noadvice") != 0;
                timing |= strcmp(argv[i], "timing") == 0;
		by_read |= strcmp(argv[i], "read") == 0;
		if (strncmp(argv[i], "threads=", 8) == 0)
			threads = strtol(argv[i] + 8, NULL, 10);
		if (strncmp(argv[i], "linger=", 7) == 0)
			linger_ms = strtol(argv[i] + 7, NULL, 10);
	}
	if (threads < 1 || threads > MAX_THREADS || (threads > 1 && by_read)) {
		fprintf(stderr, "%s: threads=T takes 1 to %d and does not go with read\n", argv[0], MAX_THREADS);
		return 2;
	}
	size_t len = pages * PAGE;

	/* Over-allocate so the region can start on a 2 MiB boundary (a THP needs an aligned PMD). */
	char *raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	buf = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
        /* The 4 KiB variant opts out so that THP `always` (the kernel-matrix guest) cannot change it;
         * "noadvice" leaves the region to the host's modes (each folio size's, Linux 6.8+). */
        if (advice && madvise(buf, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
          perror("madvise");
          return 1;
        }
        for (size_t i = 0; i < len; i += PAGE)
		buf[i] = 1;
	int zero = by_read ? open("/dev/zero", O_RDONLY | O_CLOEXEC) : -1;
	if (by_read && zero < 0) {
		perror("/dev/zero");
		return 1;
	}

	printf("ready %d\n", getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;

	/* Timing: the copies should come from memory the hypervisor backs now. A VM that reports free
	 * pages to its host (virtio free page reporting) hands memory back some seconds after it is
	 * freed, and the first touch of such a page then costs a host fault: noise larger than what
	 * the benchmark measures. Touching and freeing as much as the copies need, just before the
	 * fork, leaves backed pages on the free lists. */
	if (timing) {
		char *warm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (warm != MAP_FAILED) {
			madvise(warm, len, MADV_NOHUGEPAGE);
			for (size_t i = 0; i < len; i += PAGE)
				warm[i] = 1;
			munmap(warm, len);
		}
		/* A second "go" starts the fork, so that a benchmark's window leaves the warming out. */
		printf("warm\n");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 1;
	}
	/* The writers start now, so that no thread creation (stack, TLS, libc state) happens after the
	 * fork; they wait for the main thread at the barrier. */
	pthread_t writers[MAX_THREADS];
	if (threads > 1) {
		/* Under THP `always` khugepaged may collapse a writer's stack into a huge page, whose
		 * first write after the fork then splits it: no THP for the 4 KiB variant's process. */
		if (!thp)
			prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
		pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
		for (long t = 0; t < threads; t++) {
			if (pthread_create(&writers[t], NULL, writer, (void *)t) != 0) {
				fprintf(stderr, "%s: cannot start writer threads\n", argv[0]);
				return 1;
			}
		}
	}
	/* The child lives CHILD_MS and, on a host so busy that the parent's loop takes longer, until the
	 * parent has dirtied every page (it closes the pipe then): the answer stays N on any machine. */
	int done_pipe[2];
	if (pipe(done_pipe) != 0) {
		perror("pipe");
		return 1;
	}
	struct timespec forked, reaped;
	clock_gettime(CLOCK_MONOTONIC, &forked);
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		close(done_pipe[1]);
		struct timespec ts = {child_ms / 1000, (child_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
		char c;
		while (read(done_pipe[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(done_pipe[0]);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (threads > 1) {
		pthread_barrier_wait(&start_line);
		for (long t = 0; t < threads; t++)
			pthread_join(writers[t], NULL);
	} else if (!by_read) {
		dirty_share(0);
	} else {
		for (size_t i = 0; i < len; i += PAGE) {
			if (read(zero, buf + i, PAGE) != (ssize_t)PAGE) {
				perror("read");
				return 1;
			}
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Printed while the child still sleeps, so a benchmark can read BPF statistics before the
	 * target exits and its tracer detaches. */
	if (timing) {
		printf("dirty_ns %lld\n",
		       (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
		fflush(stdout);
	}
	if (linger_ms > 0) {
		struct timespec ts = {linger_ms / 1000, (linger_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	close(done_pipe[1]);
	waitpid(child, NULL, 0);
	clock_gettime(CLOCK_MONOTONIC, &reaped);
	/* The child's lifetime as the parent saw it (fork to reap), for the test to compare with. */
	printf("child_ms %.1f\n", (reaped.tv_sec - forked.tv_sec) * 1e3 + (reaped.tv_nsec - forked.tv_nsec) / 1e6);
	printf("done\n");
	fflush(stdout);
	return 0;
}
