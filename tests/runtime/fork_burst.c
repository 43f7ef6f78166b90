// SPDX-License-Identifier: Apache-2.0
/* Forks N children as fast as it can, each exiting at once, after "go" on stdin: a burst of ring-
 * buffer records (fork, clone return, child exit) far beyond what a tiny ring buffer holds.
 * usage: fork_burst N. Prints "ready PID" first and "done" after reaping every child. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	char line[16];

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (int i = 0; i < n; i++) {
		pid_t c = fork();
		if (c == 0)
			_exit(0);
		if (c < 0)
			return 1;
	}
	while (wait(NULL) > 0)
		;
	printf("done\n");
	fflush(stdout);
	/* Stay until told, so the capture ends on its own terms. */
	fgets(line, sizeof line, stdin);
	return 0;
}
