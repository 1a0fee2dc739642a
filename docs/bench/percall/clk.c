/* LD_PRELOAD shim: counts clock_gettime calls per clock id (slots 0-14 of the
 * 16 u64 of the file CLK_COUNT_FILE, shared, read by clk.py while the process runs).
 * With CLK_BT_FILE set, while slot 15 is non-zero each call decrements it and
 * appends a backtrace (backtrace_symbols_fd; symbolize with addr2line): how the
 * tokio sources of nfsd's clock reads were found.
 *   gcc -O2 -shared -fPIC -o clk.so clk.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <execinfo.h>
static int btfd = -1;
static unsigned long *slots;
static int (*real)(clockid_t, struct timespec *);
__attribute__((constructor)) static void init(void) {
  const char *f = getenv("CLK_COUNT_FILE");
  real = dlsym(RTLD_NEXT, "clock_gettime");
  if (!f) return;
  int fd = open(f, O_RDWR | O_CREAT, 0644);
  ftruncate(fd, 16 * 8);
  const char *b = getenv("CLK_BT_FILE"); if (b) btfd = open(b, O_WRONLY|O_CREAT|O_APPEND, 0644);
  slots = mmap(0, 16 * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}
int clock_gettime(clockid_t c, struct timespec *t) {
  if (slots) __atomic_fetch_add(&slots[(unsigned)c & 15], 1, __ATOMIC_RELAXED);
  if (slots && btfd >= 0 && __atomic_load_n(&slots[15], __ATOMIC_RELAXED) > 0) {
    __atomic_fetch_sub(&slots[15], 1, __ATOMIC_RELAXED);
    void *buf[24]; int n = backtrace(buf, 24);
    backtrace_symbols_fd(buf, n, btfd); write(btfd, "--\n", 3);
  }
  return real(c, t);
}
