// SPDX-License-Identifier: Apache-2.0
/* A workload whose copies have known authors: maps PAGES pages, populates them, prints "ready PID",
 * waits for "go" on stdin, forks a child that lives until the parent is done, and while it lives
 * write_most() writes one byte to each of the first three quarters of the pages and write_rest() to
 * the last quarter: 3/4 and 1/4 of the copy-on-write faults, each taken in its own function. Built
 * with frame pointers and the writers kept out of line (tests/runtime/CMakeLists.txt), so a sampled
 * copy's stack reads write_most ← main. Prints "done" when the child has been reaped.
 * With "interleaved", the same shares in one pass with a period of four pages: write_most() takes
 * three pages of every four and write_rest() the fourth, so that a sampler taking every N-th fault,
 * N a multiple of four, would see one writer only.
 *
 * usage: copy_writers PAGES [interleaved] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096UL

static size_t written;

/* A call out of each writer: GCC 12 sets up no frame in a leaf function, even with
 * -fno-omit-frame-pointer, and the kernel's walk would then skip the writer's caller. */
__attribute__((noinline)) void count_written(size_t pages)
{
	__asm__ volatile("" ::: "memory");
	written += pages;
}

__attribute__((noinline)) void write_most(volatile char *p, size_t pages)
{
	for (size_t i = 0; i < pages; i++)
		p[i * PAGE] = 2;
	count_written(pages);
}

__attribute__((noinline)) void write_rest(volatile char *p, size_t pages)
{
	for (size_t i = 0; i < pages; i++)
		p[i * PAGE] = 3;
	count_written(pages);
}

int main(int argc, char **argv)
{
	char line[64];
	int done[2];

	if (argc < 2) {
		fprintf(stderr, "usage: %s PAGES\n", argv[0]);
		return 2;
	}
	size_t pages = strtoul(argv[1], NULL, 10);
	int interleaved = argc > 2 && strcmp(argv[2], "interleaved") == 0;
	size_t most = pages * 3 / 4;
	char *buf = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (pages < 4 || buf == MAP_FAILED) {
		fprintf(stderr, "%s: need at least 4 pages that can be mapped\n", argv[0]);
		return 1;
	}
	memset(buf, 1, pages * PAGE);
	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	if (pipe(done))
		return 1;
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		char c;

		close(done[1]);
		/* Lives, writing nothing, until the parent closes its end. */
		while (read(done[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(done[0]);
	if (interleaved) {
		for (size_t i = 0; i + 4 <= pages; i += 4) {
			write_most(buf + i * PAGE, 3);
			write_rest(buf + (i + 3) * PAGE, 1);
		}
	} else {
		write_most(buf, most);
		write_rest(buf + most * PAGE, pages - most);
	}
	close(done[1]);
	waitpid(child, NULL, 0);
	printf("done %zu\n", written);
	fflush(stdout);
	return 0;
}
