// SPDX-License-Identifier: Apache-2.0
/* The disk family's known answer: while a fork child lives, the main thread makes exactly N fsyncs
 * and a thread named "bio_aof" (as Redis names its AOF fsync thread) exactly M fdatasyncs, each of a
 * file in DIR it has just written a 4 KiB block to; the child writes exactly C bytes to a file of its
 * own and nothing else. Each call is timed here too. Prints "ready PID", waits for "go" on stdin,
 * then prints "main N SUM_US MAX_US", "bio_aof M SUM_US MAX_US" and the main thread's writes
 * "write N SUM_US MAX_US" once the child has exited, then "done", and waits for a line.
 * usage: fsync_pair N M DIR [C] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct syncs {
	int n;
	int datasync;
	const char *path;
	uint64_t sum_ns, max_ns;
	uint64_t write_sum_ns, write_max_ns;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *run(void *arg)
{
	struct syncs *s = arg;
	char block[4096];
	int fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		exit(1);
	memset(block, 'x', sizeof(block));
	for (int i = 0; i < s->n; i++) {
		uint64_t w0 = now_ns();
		if (write(fd, block, sizeof(block)) != (ssize_t)sizeof(block))
			exit(1);
		uint64_t w = now_ns() - w0;
		s->write_sum_ns += w;
		if (w > s->write_max_ns)
			s->write_max_ns = w;
		uint64_t t0 = now_ns();
		if ((s->datasync ? fdatasync(fd) : fsync(fd)) != 0)
			exit(1);
		uint64_t ns = now_ns() - t0;
		s->sum_ns += ns;
		if (ns > s->max_ns)
			s->max_ns = ns;
	}
	close(fd);
	return NULL;
}

static void *bio_aof(void *arg)
{
	prctl(PR_SET_NAME, "bio_aof");
	return run(arg);
}

int main(int argc, char **argv)
{
	char line[16], main_path[4096], bio_path[4096], child_path[4096];
	int n = argc > 1 ? atoi(argv[1]) : 50;
	int m = argc > 2 ? atoi(argv[2]) : 30;
	const char *dir = argc > 3 ? argv[3] : "/tmp";
	long child_bytes = argc > 4 ? atol(argv[4]) : 12388;
	int release[2];
	pthread_t t;
	pid_t child;

	snprintf(main_path, sizeof(main_path), "%s/main.dat", dir);
	snprintf(bio_path, sizeof(bio_path), "%s/bio.dat", dir);
	snprintf(child_path, sizeof(child_path), "%s/child.dat", dir);
	struct syncs main_syncs = {n, 0, main_path, 0, 0, 0, 0}, bio_syncs = {m, 1, bio_path, 0, 0, 0, 0};

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || pipe(release))
		return 1;
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		/* Writes its C bytes, then lives until the parent's calls are done (the pipe's write
		 * end closes). */
		char c, block[4096];
		int fd = open(child_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		if (fd < 0)
			_exit(1);
		memset(block, 'c', sizeof(block));
		for (long left = child_bytes; left > 0;) {
			size_t len = left < (long)sizeof(block) ? (size_t)left : sizeof(block);
			ssize_t done = write(fd, block, len);

			if (done <= 0)
				_exit(1);
			left -= done;
		}
		close(fd);
		close(release[1]);
		while (read(release[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(release[0]);
	if (pthread_create(&t, NULL, bio_aof, &bio_syncs))
		return 1;
	run(&main_syncs);
	pthread_join(t, NULL);
	close(release[1]);
	waitpid(child, NULL, 0);
	printf("main %d %llu %llu\n", n, (unsigned long long)(main_syncs.sum_ns / 1000),
	       (unsigned long long)((main_syncs.max_ns + 999) / 1000));
	printf("bio_aof %d %llu %llu\n", m, (unsigned long long)(bio_syncs.sum_ns / 1000),
	       (unsigned long long)((bio_syncs.max_ns + 999) / 1000));
	printf("write %d %llu %llu\n", n, (unsigned long long)(main_syncs.write_sum_ns / 1000),
	       (unsigned long long)((main_syncs.write_max_ns + 999) / 1000));
	printf("done\n");
	fflush(stdout);
	fgets(line, sizeof(line), stdin);
	return 0;
}
