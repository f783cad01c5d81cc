/*
 * cadv_probe: one process of a simulated cluster node, for the adversarial
 * cluster suite (tests/test_cluster_adv.c).  The node is its RANGESHIM_SHM;
 * the test sets RANGESHIM_SCOPE and RANGESHIM_CLUSTER_FS.  Each mode makes
 * one kind of call and prints what the call returned, so that the test can
 * compare it with the same call made without the shim.
 *
 *   cadv_probe truncate FILE LEN      truncate(FILE, LEN) by path (no fd of
 *                                     the file is open)
 *   cadv_probe pread FILE OFF LEN     open FILE read-only, pread LEN bytes
 *                                     at OFF (as user CADV_UID, if set and
 *                                     root)
 *   cadv_probe pwrite FILE OFF LEN    open FILE read-write, pwrite LEN
 *                                     bytes at OFF
 *   cadv_probe rowrite FILE           open FILE read-write (as CADV_UID, if
 *                                     set and root), fchmod it 0444, pread
 *                                     100 bytes at 0 (rrc), then pwrite 100
 *                                     bytes at 0 (rc)
 *   cadv_probe fcntllock FILE         take a POSIX write lock on [0, 100)
 *                                     of FILE (as SQLite or ROMIO do), then
 *                                     pwrite 100 bytes at 0 under it
 *   cadv_probe unlockall FILE         lock byte 2^61 + 10 (F_SETLK), unlock
 *                                     "to the end" from 0, print whether
 *                                     another process still finds the byte
 *                                     locked (left=l_type), then pwrite 100
 *                                     bytes at 0
 *   cadv_probe highlock FILE          lock byte 2^61 + 10 (F_SETLK), print
 *                                     pid=, then pwrite 100 bytes at 0
 *   cadv_probe flockun FILE           flock(LOCK_EX) then flock(LOCK_UN) on a
 *                                     read-only descriptor; then another
 *                                     description's flock(LOCK_EX|LOCK_NB)
 *                                     (nb, nberrno) and a pwrite of 100
 *                                     bytes at 0 through a third
 *   cadv_probe ownlock FILE HOW [SECS]
 *                                     take the process's own lock on FILE
 *                                     (HOW: whole = F_SETLKW l_len 0, lockf
 *                                     = lockf(F_LOCK, 0) at 0, flock =
 *                                     flock(LOCK_EX), ofd = F_OFD_SETLKW
 *                                     l_len 0), pwrite 100 bytes at 0 under
 *                                     it (rc); with SECS, print "held",
 *                                     wait for FILE.go, pwrite again (a new
 *                                     pin: again=R), print "again", and
 *                                     hold the lock until FILE.stop (at
 *                                     most SECS)
 *   cadv_probe trylock FILE OFF LEN   F_SETLK a write lock on [OFF, OFF+LEN)
 *                                     (LEN 0: to the end)
 *   cadv_probe lockftest FILE         lockf(F_TEST, 0) at offset 0
 *   cadv_probe getlk FILE             F_GETLK a write lock on all of FILE:
 *                                     type= start= len= pid= of the answer
 *   cadv_probe badlk FILE             lock calls with bad arguments: F_SETLK
 *                                     with an unmapped pointer (rc1= e1=),
 *                                     F_GETLK of all of FILE through a
 *                                     read-only page (rc= errno=)
 *   cadv_probe many DIR N [SECS]      create N files in DIR, keep them
 *                                     open, pwrite 4 KiB to each; then
 *                                     sleep SECS with all of them open
 *   cadv_probe stream FILE MB SECS    pwrite MB MiB at 0, back to back, for
 *                                     SECS seconds; rc is how many
 *   cadv_probe append FILE N TAG      N write()s of 199-byte lines through
 *                                     an O_APPEND descriptor
 *   cadv_probe highown FILE           pwrite 100 bytes at 0, then on
 *                                     [2^61 + 5, +10): F_GETLK of a write
 *                                     lock (gtype= gpid=), lockf(F_TEST)
 *                                     (trc= terr=), F_SETLK of a write
 *                                     lock (rc, errno)
 *   cadv_probe seq DIR N NOFILE       under a soft descriptor limit of
 *                                     NOFILE, N times: create DIR/sI,
 *                                     pwrite 4 KiB, close; rc is how many
 *                                     failed, fds= the descriptors open
 *                                     at the end
 *   cadv_probe limit FILE WARM FREE SECS
 *                                     pwrite 100 bytes to WARM (attach,
 *                                     agent), fill the descriptor table
 *                                     (soft limit 128) but FREE numbers,
 *                                     print "ready", wait for FILE.go,
 *                                     pwrite 100 bytes at 0 of FILE
 *                                     (opened before the fill), report,
 *                                     then hold it all for SECS
 * Each prints "rc=R errno=E ms=T verdict=PASS" (ms: how long the call
 * took).
 */
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void report(long long rc, int err, double t0)
{
	printf("rc=%lld errno=%d ms=%.0f shim=%d verdict=PASS\n", rc, err, now_ms() - t0,
	       shim_loaded());
}

/* pwrite 100 bytes of buf at 0 through fd, and report it. */
static int write_report(int fd, const char *buf)
{
	double t0 = now_ms();
	long long rc = pwrite(fd, buf, 100, 0);

	report(rc, rc < 0 ? errno : 0, t0);
	return 0;
}

/* CADV_UID: become that user first (a root test's stand-in for a user
 * who may read the file but not write it).  -1, said, if that fails. */
static int become_cadv_uid(void)
{
	if (getenv("CADV_UID") && geteuid() == 0) {
		gid_t g = (gid_t)atoi(getenv("CADV_UID"));

		if (setgroups(0, NULL) < 0 || setresgid(g, g, g) < 0 ||
		    setresuid((uid_t)g, (uid_t)g, (uid_t)g) < 0) {
			printf("verdict=FAIL setresuid: %s\n", strerror(errno));
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static char buf[1 << 16];
	double t0;
	long long rc;
	int fd, err;

	if (argc < 3) {
		fprintf(stderr, "usage: cadv_probe MODE FILE ...\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	memset(buf, 'a', sizeof buf);
	if (strcmp(argv[1], "truncate") == 0 && argc == 4) {
		t0 = now_ms();
		rc = truncate(argv[2], atoll(argv[3]));
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "rowrite") == 0 && argc == 3) {
		long long rrc;

		if (become_cadv_uid() < 0)
			return 1;
		fd = open(argv[2], O_RDWR);
		if (fd < 0 || fchmod(fd, 0444) < 0) {
			printf("verdict=FAIL open/fchmod %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		rrc = pread(fd, buf, 100, 0);
		printf("rrc=%lld ", rrc);
		memset(buf, 'a', sizeof buf);
		t0 = now_ms();
		rc = pwrite(fd, buf, 100, 0);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if ((strcmp(argv[1], "pread") == 0 || strcmp(argv[1], "pwrite") == 0) && argc == 5) {
		int w = argv[1][1] == 'w';
		long long off = strtoll(argv[3], NULL, 0), len = atoll(argv[4]);

		if (len > (long long)sizeof buf)
			len = sizeof buf;
		if (become_cadv_uid() < 0)
			return 1;
		fd = open(argv[2], w ? O_RDWR : O_RDONLY);
		if (fd < 0) {
			printf("verdict=FAIL open %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		t0 = now_ms();
		rc = w ? pwrite(fd, buf, (size_t)len, (off_t)off) : pread(fd, buf, (size_t)len, (off_t)off);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "fcntllock") == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0,
				    .l_len = 100 };

		fd = open(argv[2], O_RDWR);
		if (fd < 0 || fcntl(fd, F_SETLKW, &fl) < 0) {
			printf("verdict=FAIL open/lock %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		t0 = now_ms();
		rc = pwrite(fd, buf, 100, 0);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "ownlock") == 0 && (argc == 4 || argc == 5)) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
		const char *how = argv[3];
		char go[4200], stop[4200];

		fd = open(argv[2], O_RDWR);
		if (fd < 0) {
			printf("verdict=FAIL open %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		if (strcmp(how, "whole") == 0)
			rc = fcntl(fd, F_SETLKW, &fl);
		else if (strcmp(how, "ofd") == 0)
			rc = fcntl(fd, F_OFD_SETLKW, &fl);
		else if (strcmp(how, "lockf") == 0)
			rc = lockf(fd, F_LOCK, 0);
		else if (strcmp(how, "flock") == 0)
			rc = flock(fd, LOCK_EX);
		else
			rc = -2;
		if (rc < 0) {
			printf("verdict=FAIL lock %s: %s\n", how, rc == -2 ? "unknown" : strerror(errno));
			return 1;
		}
		t0 = now_ms();
		rc = pwrite(fd, buf, 100, 0);
		err = rc < 0 ? errno : 0;
		if (argc == 4) {
			report(rc, err, t0);
			return 0;
		}
		snprintf(go, sizeof go, "%s.go", argv[2]);
		snprintf(stop, sizeof stop, "%s.stop", argv[2]);
		printf("held rc=%lld\n", rc);
		{
			double end = now_ms() + 1e3 * atof(argv[4]);
			long long again;

			while (access(go, F_OK) != 0 && now_ms() < end)
				usleep(10000);
			again = pwrite(fd, buf, 100, 0);
			printf("again=%lld again\n", again);
			while (access(stop, F_OK) != 0 && now_ms() < end)
				usleep(10000);
		}
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "unlockall") == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = (off_t)((1LL << 61) + 10), .l_len = 1 };
		struct flock un = { .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0,
				    .l_len = 0 };
		int st;
		pid_t c;

		fd = open(argv[2], O_RDWR);
		if (fd < 0 || fcntl(fd, F_SETLK, &fl) < 0 || fcntl(fd, F_SETLK, &un) < 0) {
			printf("verdict=FAIL open/lock/unlock %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		/* Is the high byte still locked?  Ask from another process. */
		c = fork();
		if (c == 0) {
			int f2 = open(argv[2], O_RDWR);

			fl.l_type = F_WRLCK;
			_exit(f2 < 0 || fcntl(f2, F_GETLK, &fl) < 0 ? 255 : fl.l_type);
		}
		if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st)) {
			printf("verdict=FAIL fork/wait\n");
			return 1;
		}
		printf("left=%d ", WEXITSTATUS(st));
		return write_report(fd, buf);
	}
	if (strcmp(argv[1], "highlock") == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = (off_t)((1LL << 61) + 10), .l_len = 1 };

		fd = open(argv[2], O_RDWR);
		if (fd < 0 || fcntl(fd, F_SETLK, &fl) < 0) {
			printf("verdict=FAIL open/lock %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		printf("pid=%d locked\n", (int)getpid());
		return write_report(fd, buf);
	}
	if (strcmp(argv[1], "flockun") == 0) {
		int fd2, fd3, nb;

		fd = open(argv[2], O_RDONLY);
		fd2 = open(argv[2], O_RDONLY);
		fd3 = open(argv[2], O_RDWR);
		if (fd < 0 || fd2 < 0 || fd3 < 0 || flock(fd, LOCK_EX) < 0 ||
		    flock(fd, LOCK_UN) < 0) {
			printf("verdict=FAIL open/flock %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		nb = flock(fd2, LOCK_EX | LOCK_NB);
		printf("nb=%d nberrno=%d ", nb, nb < 0 ? errno : 0);
		if (nb == 0)
			flock(fd2, LOCK_UN);
		return write_report(fd3, buf);
	}
	if (strcmp(argv[1], "trylock") == 0 && argc == 5) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = (off_t)atoll(argv[3]), .l_len = (off_t)atoll(argv[4]) };

		fd = open(argv[2], O_RDWR);
		t0 = now_ms();
		rc = fd < 0 ? -1 : fcntl(fd, F_SETLK, &fl);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "badlk") == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
		struct flock *ro = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
					-1, 0);
		long long rc1;

		fd = open(argv[2], O_RDWR);
		if (fd < 0 || ro == MAP_FAILED) {
			printf("verdict=FAIL open/mmap: %s\n", strerror(errno));
			return 1;
		}
		rc1 = fcntl(fd, F_SETLK, (struct flock *)8);
		printf("rc1=%lld e1=%d ", rc1, rc1 < 0 ? errno : 0);
		*ro = fl;
		mprotect(ro, 4096, PROT_READ);
		t0 = now_ms();
		rc = fcntl(fd, F_GETLK, ro);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "lockftest") == 0) {
		fd = open(argv[2], O_RDWR);
		t0 = now_ms();
		rc = fd < 0 ? -1 : lockf(fd, F_TEST, 0);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "getlk") == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

		fd = open(argv[2], O_RDWR);
		t0 = now_ms();
		rc = fd < 0 ? -1 : fcntl(fd, F_GETLK, &fl);
		err = rc < 0 ? errno : 0;
		printf("type=%d start=%lld len=%lld pid=%d ", fl.l_type, (long long)fl.l_start,
		       (long long)fl.l_len, (int)fl.l_pid);
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "many") == 0 && (argc == 4 || argc == 5)) {
		int n = atoi(argv[3]), bad = 0;

		t0 = now_ms();
		for (int i = 0; i < n; i++) {
			char p[4096];

			snprintf(p, sizeof p, "%s/f%d", argv[2], i);
			fd = open(p, O_RDWR | O_CREAT, 0600);
			if (fd < 0 || pwrite(fd, buf, 4096, 0) != 4096)
				bad++;
			/* kept open: its node grant stays cached */
		}
		report(bad, 0, t0);
		if (argc == 5)
			sleep((unsigned)atoi(argv[4]));	/* files and grants held */
		return 0;
	}
	if (strcmp(argv[1], "highown") == 0 && argc == 3) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = (off_t)((1ULL << 61) + 5), .l_len = 10 };
		long long trc;

		fd = open(argv[2], O_RDWR);
		if (fd < 0 || pwrite(fd, buf, 100, 0) != 100) {
			printf("verdict=FAIL open/pwrite: %s\n", strerror(errno));
			return 1;
		}
		if (fcntl(fd, F_GETLK, &fl) < 0) {
			printf("verdict=FAIL F_GETLK: %s\n", strerror(errno));
			return 1;
		}
		printf("gtype=%d gpid=%d ", fl.l_type, (int)fl.l_pid);
		lseek(fd, (off_t)((1ULL << 61) + 5), SEEK_SET);
		trc = lockf(fd, F_TEST, 10);
		printf("trc=%lld terr=%d ", trc, trc < 0 ? errno : 0);
		fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET,
				     .l_start = (off_t)((1ULL << 61) + 5), .l_len = 10 };
		t0 = now_ms();
		rc = fcntl(fd, F_SETLK, &fl);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		return 0;
	}
	if (strcmp(argv[1], "seq") == 0 && argc == 5) {
		int n = atoi(argv[3]), bad = 0, fds = 0;
		struct rlimit rl;
		DIR *d;

		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = (rlim_t)atoll(argv[4]);
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			printf("verdict=FAIL setrlimit: %s\n", strerror(errno));
			return 1;
		}
		t0 = now_ms();
		for (int i = 0; i < n; i++) {
			char p[4096];

			snprintf(p, sizeof p, "%s/s%d", argv[2], i);
			fd = open(p, O_RDWR | O_CREAT, 0600);
			if (fd < 0 || pwrite(fd, buf, 4096, 0) != 4096)
				bad++;
			if (fd >= 0)
				close(fd);
		}
		d = opendir("/proc/self/fd");
		while (d && readdir(d))
			fds++;
		if (d)
			closedir(d);
		printf("fds=%d ", fds - 3);	/* ., .. and the DIR's own */
		report(bad, 0, t0);
		return 0;
	}
	if (strcmp(argv[1], "limit") == 0 && argc == 6) {
		struct rlimit rl;
		char go[4096];
		int w, nul, k = 0, dups[256];

		w = open(argv[3], O_RDWR | O_CREAT, 0600);
		fd = open(argv[2], O_RDWR);
		nul = open("/dev/null", O_RDONLY);
		if (w < 0 || fd < 0 || nul < 0 || pwrite(w, buf, 100, 0) != 100) {
			printf("verdict=FAIL warm-up: %s\n", strerror(errno));
			return 1;
		}
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = 128;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			printf("verdict=FAIL setrlimit: %s\n", strerror(errno));
			return 1;
		}
		while (k < 256 && (dups[k] = dup(nul)) >= 0)
			k++;
		for (int i = 0; i < atoi(argv[4]) && k > 0; i++)
			close(dups[--k]);
		printf("ready filled=%d\n", k);
		snprintf(go, sizeof go, "%s.go", argv[2]);
		for (int i = 0; i < 30000 && access(go, F_OK) != 0; i++)
			usleep(1000);
		t0 = now_ms();
		rc = pwrite(fd, buf, 100, 0);
		err = rc < 0 ? errno : 0;
		report(rc, err, t0);
		sleep((unsigned)atoi(argv[5]));
		return 0;
	}
	if (strcmp(argv[1], "stream") == 0 && argc == 5) {
		size_t len = (size_t)atoll(argv[3]) << 20;
		char *big = malloc(len);
		double end = now_ms() + 1e3 * atof(argv[4]);
		long long n = 0;

		fd = open(argv[2], O_RDWR | O_CREAT, 0600);
		if (!big || fd < 0) {
			printf("verdict=FAIL stream: %s\n", strerror(errno));
			return 1;
		}
		memset(big, 's', len);
		t0 = now_ms();
		/* Back to back: a stop almost always lands inside a call, so
		 * inside its node grant. */
		while (now_ms() < end && pwrite(fd, big, len, 0) == (ssize_t)len)
			n++;
		report(n, 0, t0);
		return 0;
	}
	if (strcmp(argv[1], "append") == 0 && argc == 5) {
		int n = atoi(argv[3]);
		char line[200];

		fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT, 0600);
		if (fd < 0) {
			printf("verdict=FAIL open: %s\n", strerror(errno));
			return 1;
		}
		t0 = now_ms();
		/* 199-byte lines: "TAG NNNNNNNN xxx...\n" */
		for (int i = 0; i < n; i++) {
			int k = snprintf(line, sizeof line, "%s %08d ", argv[4], i);

			memset(line + k, argv[4][0], sizeof line - 1 - (size_t)k);
			line[sizeof line - 2] = '\n';
			if (write(fd, line, sizeof line - 1) != (ssize_t)sizeof line - 1) {
				printf("verdict=FAIL write: %s\n", strerror(errno));
				return 1;
			}
		}
		report(n, 0, t0);
		return 0;
	}
	fprintf(stderr, "cadv_probe: bad mode\n");
	return 2;
}
