/* mkinitramfs OUT ENTRY...: writes an uncompressed newc cpio archive (the format Linux unpacks
 * as initramfs, Documentation/driver-api/early-userspace/buffer-format.rst) without needing root
 * or a staging tree, so device nodes can be included. Entries, in order:
 *   dir:PATH            directory, mode 0755
 *   file:PATH:SOURCE    regular file, mode 0755, contents of SOURCE
 *   char:PATH:MAJ:MIN   character device, mode 0600
 * Owner root, mtime 0: the archive is byte-for-byte reproducible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *out;
static unsigned long offset, inode = 1;

static void pad(void) {
  while (offset % 4) {
    fputc(0, out);
    ++offset;
  }
}

static void entry(const char *name, unsigned long mode, const unsigned char *data, unsigned long size,
                  unsigned long rmaj, unsigned long rmin) {
  const unsigned long namesize = strlen(name) + 1;
  offset += (unsigned long)fprintf(out, "070701%08lX%08lX%08lX%08lX%08lX%08lX%08lX%08lX%08lX%08lX%08lX%08lX%08lX",
                                   inode++, mode, 0ul, 0ul, (mode & 0170000) == 0040000 ? 2ul : 1ul, 0ul,
                                   size, 0ul, 0ul, rmaj, rmin, namesize, 0ul);
  fwrite(name, 1, namesize, out);
  offset += namesize;
  pad();
  if (size) fwrite(data, 1, size, out);
  offset += size;
  pad();
}

static unsigned char *slurp(const char *path, unsigned long *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *size = (unsigned long)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *data = malloc(*size ? *size : 1);
  if (data && fread(data, 1, *size, f) != *size) {
    free(data);
    data = NULL;
  }
  fclose(f);
  return data;
}

int main(int argc, char **argv) {
  if (argc < 2 || !(out = fopen(argv[1], "wb"))) {
    fprintf(stderr, "usage: mkinitramfs OUT dir:PATH|file:PATH:SOURCE|char:PATH:MAJ:MIN...\n");
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    char *spec = argv[i], *type = strtok(spec, ":"), *path = strtok(NULL, ":");
    if (!type || !path) goto bad;
    if (!strcmp(type, "dir")) {
      entry(path, 0040755, NULL, 0, 0, 0);
    } else if (!strcmp(type, "file")) {
      const char *source = strtok(NULL, "");
      unsigned long size = 0;
      unsigned char *data = source ? slurp(source, &size) : NULL;
      if (!data) {
        fprintf(stderr, "mkinitramfs: cannot read %s\n", source ? source : "(none)");
        return 1;
      }
      entry(path, 0100755, data, size, 0, 0);
      free(data);
    } else if (!strcmp(type, "char")) {
      const char *major = strtok(NULL, ":"), *minor = strtok(NULL, ":");
      if (!major || !minor) goto bad;
      entry(path, 0020600, NULL, 0, strtoul(major, NULL, 10), strtoul(minor, NULL, 10));
    } else {
      goto bad;
    }
    continue;
  bad:
    fprintf(stderr, "mkinitramfs: bad entry %s\n", argv[i]);
    return 2;
  }
  entry("TRAILER!!!", 0, NULL, 0, 0, 0);
  return fclose(out) == 0 ? 0 : 1;
}
