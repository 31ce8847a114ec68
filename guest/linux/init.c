/* /init of the Linux test guest (PID 1). Mounts devtmpfs on /dev, proc on /proc and sysfs on /sys,
 * makes sure fds 0-2 are the console, prints "init: N CPUs online", then runs the programs named
 * by its arguments one after the other: the words after " -- " on the kernel command line, one
 * program per group, groups separated by a "," word:
 *     console=ttyS0 -- lwp_selfcheck , lwp_pair 3      runs /bin/lwp_selfcheck, /bin/lwp_pair 3
 * A group "@NAME" runs the groups listed in /etc/NAME instead, one per line, words separated by
 * spaces (Linux passes at most 32 arguments to init: longer command lists live in a file).
 * After each: "init: NAME exited S" or "init: NAME killed by signal N". Then it ends the VM with
 * outl(worst, 0x510) (pmuvm's exit status = worst: the largest of the statuses, 128 + N for a
 * signal, 0 when all exited 0); if ioperm() fails it says why and reboots (exit status 0).
 * A PID 1 must never return, so it waits forever if even the reboot fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "guest/linux/lwp_linux.h"

#define EXIT_PORT 0x510

static void mount_fs(const char *source, const char *target, const char *type) {
  mkdir(target, 0755);
  if (mount(source, target, type, 0, NULL) != 0 && errno != EBUSY)
    say("init: mount %s on %s: %s\n", type, target, strerror(errno));
}

static void end_vm(int status) {
  if (ioperm(EXIT_PORT, 4, 1) == 0) {
    say("init: exit status %d\n", status);
    /* The serial driver sends what is queued from its interrupt, possibly on another CPU:
     * the VM must not end before the console has it all. */
    tcdrain(STDOUT_FILENO);
    outl((unsigned)status, EXIT_PORT);
    say("init: the VMM ignored the exit port\n");
  } else {
    say("init: ioperm(0x510): %s; rebooting (exit status %d lost)\n", strerror(errno), status);
  }
  sync();
  reboot(RB_AUTOBOOT);
  say("init: reboot: %s\n", strerror(errno));
  for (;;) pause();
}

static int run(char **argv) {
  char path[256];
  snprintf(path, sizeof path, "/bin/%s", argv[0]);
  const pid_t pid = fork();
  if (pid < 0) {
    say("init: fork: %s\n", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    char *envp[] = {"PATH=/bin", NULL};
    execve(path, argv, envp);
    say("init: exec %s: %s\n", path, strerror(errno));
    _exit(127);
  }
  int wstatus = 0;
  for (;;) { /* PID 1 also reaps orphans: wait for this child */
    const pid_t done = wait(&wstatus);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      say("init: wait: %s\n", strerror(errno));
      return 1;
    }
  }
  if (WIFSIGNALED(wstatus)) {
    say("init: %s killed by signal %d\n", argv[0], WTERMSIG(wstatus));
    return 128 + WTERMSIG(wstatus);
  }
  say("init: %s exited %d\n", argv[0], WEXITSTATUS(wstatus));
  return WEXITSTATUS(wstatus);
}

/* Runs the groups of /etc/NAME (see the header); returns the worst status. */
static int run_file(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "/etc/%s", name);
  FILE *f = fopen(path, "r");
  if (!f) {
    say("init: %s: %s\n", path, strerror(errno));
    return 1;
  }
  int worst = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char *words[64];
    int n = 0;
    for (char *w = strtok(line, " \t\n"); w && n < 63; w = strtok(NULL, " \t\n")) words[n++] = w;
    if (n == 0) continue;
    words[n] = NULL;
    const int status = run(words);
    if (status > worst) worst = status;
  }
  fclose(f);
  return worst;
}

int main(int argc, char **argv) {
  mount_fs("devtmpfs", "/dev", "devtmpfs");
  if (fcntl(1, F_GETFD) < 0) { /* no /dev/console in the initramfs: open it now */
    const int fd = open("/dev/console", O_RDWR);
    if (fd >= 0) {
      for (int i = 0; i < 3; ++i)
        if (fd != i) dup2(fd, i);
      if (fd > 2) close(fd);
    }
  }
  mount_fs("proc", "/proc", "proc");
  mount_fs("sysfs", "/sys", "sysfs");
  say("init: %ld CPUs online\n", sysconf(_SC_NPROCESSORS_ONLN));
  int worst = 0;
  for (int i = 1; i < argc;) {
    int end = i;
    while (end < argc && strcmp(argv[end], ",") != 0) ++end;
    if (end > i) {
      argv[end < argc ? end : argc] = NULL; /* the "," (or argv's own NULL) ends this group */
      const int status =
          argv[i][0] == '@' && end == i + 1 ? run_file(argv[i] + 1) : run(&argv[i]);
      if (status > worst) worst = status;
    }
    i = end + 1;
  }
  end_vm(worst);
  return 0;
}
