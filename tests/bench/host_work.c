// SPDX-License-Identifier: Apache-2.0
/* The work of a process thptrace does not watch, for tests/bench/host_overhead.sh: prints the
 * nanoseconds one operation took, best of the rounds asked for.
 *
 *   host_work getppid N        N getppid() system calls
 *   host_work write N          N one-byte write() calls to a regular file (the disk family's
 *                              programs see every write of the machine)
 *   host_work pipe N           N one-byte round trips between two processes over a pipe pair
 *   host_work touch MIB        first touch of MIB MiB of fresh anonymous memory, one write per 4 KiB
 *   host_work cow MIB          after fork, the parent writes once per 4 KiB page of MIB MiB it
 *                              touched before (each write a copy-on-write fault), the child waiting
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static char *map_fresh(size_t bytes)
{
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	/* 4 KiB pages whatever the host's THP mode: the cost per fault is what is compared. */
	madvise(p, bytes, MADV_NOHUGEPAGE);
	return p;
}

static double run_getppid(long n)
{
	uint64_t t0 = now_ns();

	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	return (double)(now_ns() - t0) / (double)n;
}

static double run_write(long n)
{
	char path[] = "/tmp/thptrace-host-write.XXXXXX";
	int fd = mkstemp(path);
	uint64_t t0;
	char b = 'w';

	if (fd < 0)
		die("mkstemp");
	unlink(path);
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		/* Back to the start now and then: the file stays a few pages. */
		if ((i & 4095) == 0 && lseek(fd, 0, SEEK_SET) < 0)
			die("lseek");
		if (write(fd, &b, 1) != 1)
			die("write");
	}
	double ns = (double)(now_ns() - t0) / (double)n;
	close(fd);
	return ns;
}

static double run_pipe(long n)
{
	int to_child[2], to_parent[2];
	char b = 0;
	pid_t child;
	uint64_t t0;

	if (pipe(to_child) || pipe(to_parent))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		for (long i = 0; i < n; i++) {
			if (read(to_child[0], &b, 1) != 1 || write(to_parent[1], &b, 1) != 1)
				_exit(1);
		}
		_exit(0);
	}
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (write(to_child[1], &b, 1) != 1 || read(to_parent[0], &b, 1) != 1)
			die("pipe round trip");
	}
	t0 = now_ns() - t0;
	waitpid(child, NULL, 0);
	close(to_child[0]);
	close(to_child[1]);
	close(to_parent[0]);
	close(to_parent[1]);
	return (double)t0 / (double)n;
}

static double run_touch(size_t mib)
{
	size_t bytes = mib << 20;
	char *p = map_fresh(bytes);
	uint64_t t0 = now_ns();

	for (size_t off = 0; off < bytes; off += PAGE)
		p[off] = 1;
	t0 = now_ns() - t0;
	munmap(p, bytes);
	return (double)t0 / (double)(bytes / PAGE);
}

static double run_cow(size_t mib)
{
	size_t bytes = mib << 20;
	char *p = map_fresh(bytes);
	int ready[2];
	pid_t child;
	uint64_t t0;
	char b;

	for (size_t off = 0; off < bytes; off += PAGE)
		p[off] = 1;
	if (pipe(ready))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		/* Holds the pages shared until the parent is done. */
		close(ready[1]);
		if (read(ready[0], &b, 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(ready[0]);
	t0 = now_ns();
	for (size_t off = 0; off < bytes; off += PAGE)
		p[off] = 2;
	t0 = now_ns() - t0;
	close(ready[1]);
	waitpid(child, NULL, 0);
	munmap(p, bytes);
	return (double)t0 / (double)(bytes / PAGE);
}

int main(int argc, char **argv)
{
	double best = 0;
	long n;
	int rounds;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: %s getppid|write|pipe|touch|cow N [ROUNDS]\n", argv[0]);
		return 2;
	}
	n = strtol(argv[2], NULL, 10);
	rounds = argc == 4 ? atoi(argv[3]) : 5;
	if (n <= 0 || rounds <= 0) {
		fprintf(stderr, "%s: N and ROUNDS must be positive numbers.\n", argv[0]);
		return 2;
	}
	for (int r = 0; r < rounds; r++) {
		double ns;

		if (!strcmp(argv[1], "getppid"))
			ns = run_getppid(n);
		else if (!strcmp(argv[1], "write"))
			ns = run_write(n);
		else if (!strcmp(argv[1], "pipe"))
			ns = run_pipe(n);
		else if (!strcmp(argv[1], "touch"))
			ns = run_touch((size_t)n);
		else if (!strcmp(argv[1], "cow"))
			ns = run_cow((size_t)n);
		else {
			fprintf(stderr, "%s: unknown work '%s' (getppid, write, pipe, touch or cow).\n", argv[0], argv[1]);
			return 2;
		}
		if (r == 0 || ns < best)
			best = ns;
	}
	printf("%.1f\n", best);
	return 0;
}
