// SPDX-License-Identifier: Apache-2.0
/* A process whose name is not text: prctl(PR_SET_NAME) gives it a byte that is not UTF-8 (0xFF), a
 * control character and markup (< & " '), as any process may name itself. Prints "ready PID", then
 * for each line on stdin forks a child that lives 200 ms, and exits at the end of its input.
 * tests/runtime/hostile_name_test.cpp captures it and reads what the writers made of the name. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	if (prctl(PR_SET_NAME, "\xff\x01<&\"'odd", 0, 0, 0) != 0) {
		perror("prctl");
		return 1;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		pid_t child = fork();
		if (child == 0) {
			usleep(200 * 1000);
			_exit(0);
		}
		if (child > 0)
			waitpid(child, NULL, 0);
		printf("forked\n");
		fflush(stdout);
	}
	return 0;
}
