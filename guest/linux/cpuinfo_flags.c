/* cpuinfo_flags [FLAG...]: prints the "flags" line of every processor in /proc/cpuinfo as
 * "cpuinfo_flags: cpu N: ..." and, for each FLAG, "cpuinfo_flags: FLAG present" or
 * "cpuinfo_flags: FLAG missing on cpu N". Exits 0 only if every FLAG is on every processor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest/linux/lwp_linux.h"

static int has_word(const char *list, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
      return 1;
  return 0;
}

int main(int argc, char **argv) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) {
    say("cpuinfo_flags: FAIL: cannot open /proc/cpuinfo\n");
    return 1;
  }
  static char line[8192];
  int cpu = -1, cpus = 0, missing = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "processor", 9) && strchr(line, ':')) cpu = atoi(strchr(line, ':') + 1);
    if (strncmp(line, "flags", 5) != 0 || !strchr(line, ':')) continue;
    const char *flags = strchr(line, ':') + 1;
    ++cpus;
    say("cpuinfo_flags: cpu %d:%s", cpu, flags);
    for (int i = 1; i < argc; ++i)
      if (!has_word(flags, argv[i])) {
        say("cpuinfo_flags: %s missing on cpu %d\n", argv[i], cpu);
        ++missing;
      }
  }
  fclose(f);
  if (cpus == 0) {
    say("cpuinfo_flags: FAIL: no flags line\n");
    return 1;
  }
  for (int i = 1; !missing && i < argc; ++i) say("cpuinfo_flags: %s present\n", argv[i]);
  return missing ? 1 : 0;
}
