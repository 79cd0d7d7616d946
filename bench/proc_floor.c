/* The kernel's floor for what the probe reads: one compiled process, no fork, no parsing,
 * reading stat of every PID and, for user processes (no PF_KTHREAD), status, io, wchan, cgroup,
 * cmdline and every fd link (lstat for the mode, readlink for the target). No shell tool can
 * read the same for less.
 * Built and run by bench/probe_cost.py:  cc -O2 -o proc_floor bench/proc_floor.c */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[1 << 16];

/* Reads the whole file; its first block stays in buf, NUL-terminated. */
static long slurp(const char *path) {
	static char rest[1 << 16];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof buf - 1);
	long total = n > 0 ? n : 0;
	buf[total] = 0;
	while (n > 0 && (n = read(fd, rest, sizeof rest)) > 0)
		total += n;
	if (fd >= 0)
		close(fd);
	return total;
}

/* PF_KTHREAD in the flags field, the 7th after the last ") " of the stat record in buf. */
static int kernel_thread(void) {
	char *p = strrchr(buf, ')');
	unsigned long flags = 0;
	if (!p || sscanf(p + 2, "%*s %*s %*s %*s %*s %*s %lu", &flags) != 1)
		return 0;
	return (flags & 0x00200000UL) != 0;
}

int main(void) {
	static const char *files[] = {"status", "io", "wchan", "cgroup", "cmdline"};
	char path[600], link[4096];
	long bytes = 0, fds = 0;
	struct dirent *e, *f;
	struct stat st;
	DIR *proc = opendir("/proc");
	if (!proc)
		return 1;
	while ((e = readdir(proc))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		bytes += slurp(path);
		if (kernel_thread())
			continue;
		for (unsigned i = 0; i < sizeof files / sizeof *files; i++) {
			snprintf(path, sizeof path, "/proc/%s/%s", e->d_name, files[i]);
			bytes += slurp(path);
		}
		snprintf(path, sizeof path, "/proc/%s/fd", e->d_name);
		DIR *d = opendir(path);
		if (!d)
			continue;
		while ((f = readdir(d))) {
			if (f->d_name[0] == '.')
				continue;
			snprintf(path, sizeof path, "/proc/%s/fd/%s", e->d_name, f->d_name);
			lstat(path, &st);
			if (readlink(path, link, sizeof link) > 0)
				fds++;
		}
		closedir(d);
	}
	closedir(proc);
	printf("%ld bytes %ld fd links\n", bytes, fds);
	return 0;
}
