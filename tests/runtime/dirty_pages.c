// SPDX-License-Identifier: Apache-2.0
// A known answer for thptrace predict's soft-dirty rehearsal: maps BUFFER_PAGES pages and touches
// them all, maps FRESH_PAGES more and leaves them untouched, says "ready" on stderr, and on SIGUSR1
// writes one byte to each of the first WRITE_PAGES pages once (paced over half a second), then gives
// the buffer's last FRESH_PAGES back (MADV_DONTNEED) and touches them again, and touches the untouched
// ones, says "written", then sleeps until killed. No fork, no other writes of its own: the pages a
// fork at the signal would have copied are WRITE_PAGES and a few of libc's and the stack's; the
// 2 x FRESH_PAGES touched fresh are soft-dirty too, and copy nothing after a fork.
// Usage: dirty_pages BUFFER_PAGES WRITE_PAGES [FRESH_PAGES]
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t go;

static void on_usr1(int sig) {
  (void)sig;
  go = 1;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: dirty_pages BUFFER_PAGES WRITE_PAGES [FRESH_PAGES]\n");
    return 2;
  }
  const long page = sysconf(_SC_PAGESIZE);
  const long pages = atol(argv[1]), writes = atol(argv[2]), fresh = argc == 4 ? atol(argv[3]) : 0;
  if (pages <= 0 || writes < 0 || writes > pages || fresh < 0 || writes + fresh > pages) return 2;
  char* buf = mmap(NULL, (size_t)(pages * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* untouched =
      mmap(NULL, (size_t)((fresh ? fresh : 1) * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED || untouched == MAP_FAILED) return 1;
  // 4 KiB pages only: a huge page would be soft-dirty as a whole.
  madvise(buf, (size_t)(pages * page), MADV_NOHUGEPAGE);
  madvise(untouched, (size_t)((fresh ? fresh : 1) * page), MADV_NOHUGEPAGE);
  memset(buf, 1, (size_t)(pages * page));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  fprintf(stderr, "ready\n");
  while (!go) pause();
  const struct timespec gap = {0, 500000000L / (writes ? writes : 1)};
  for (long i = 0; i < writes; i++) {
    buf[i * page] = 2;
    if (i % 64 == 63) nanosleep(&gap, NULL);
  }
  char* given_back = buf + (pages - fresh) * page;
  madvise(given_back, (size_t)(fresh * page), MADV_DONTNEED);
  for (long i = 0; i < fresh; i++) {
    given_back[i * page] = 3;
    untouched[i * page] = 3;
  }
  fprintf(stderr, "written\n");
  for (;;) pause();
}
