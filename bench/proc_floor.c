/* The kernel's floor for what the probe reads: one compiled process, no fork, no parsing,
 * reading for every PID stat, status, io, wchan, cgroup and cmdline, and every fd link
 * (lstat for the mode, readlink for the target). No shell tool can read the same for less.
 * Built and run by bench/probe_cost.py:  cc -O2 -o proc_floor bench/proc_floor.c */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[1 << 16];

static long slurp(const char *path) {
	int fd = open(path, O_RDONLY);
	long total = 0;
	ssize_t n;
	if (fd < 0)
		return 0;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		total += n;
	close(fd);
	return total;
}

int main(void) {
	static const char *files[] = {"stat", "status", "io", "wchan", "cgroup", "cmdline"};
	char path[512], link[4096];
	long bytes = 0, fds = 0;
	struct dirent *e, *f;
	struct stat st;
	DIR *proc = opendir("/proc");
	if (!proc)
		return 1;
	while ((e = readdir(proc))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
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
