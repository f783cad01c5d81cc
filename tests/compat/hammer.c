/*
 * hammer: many processes pwrite and pread overlapping ranges of one file
 * while random ones are SIGKILLed and restarted.
 *
 *   hammer FILE [procs=8] [seconds=10] [blocks=48] [maxblocks=3]
 *          [kill_min_ms=50] [kill_max_ms=400] [max_gap_ms=2000]
 *          [stop_min_ms=0] [stop_max_ms=0] [stop_gap_min_ms=100] [stop_gap_max_ms=600]
 *
 * Writer w (slot w, the same in every incarnation) writes 1..maxblocks
 * 64 KiB blocks at a random block-aligned offset, every byte w+1, then
 * preads a random range and checks that each 64 KiB block in it is
 * uniform.  Half the incarnations are forked, half are forked and exec'd.
 * The supervisor kills a random worker every kill_min..kill_max ms and
 * starts a replacement.  With stop_max_ms > 0 it also SIGSTOPs a random
 * worker every stop_gap_min..stop_gap_max ms, for stop_min..stop_max ms,
 * then SIGCONTs it (a stopped worker may be killed meanwhile): a stopped
 * holder legitimately stalls every writer that needs its range, so
 * progress gaps are measured excluding the time during which any worker
 * was stopped (max_gap_ms, checked), and reported including it
 * (max_gap_incl_stop_ms, not checked).
 *
 * What is verified:
 *   - progress: every live worker completes an operation at least every
 *     max_gap_ms, not counting time when some worker was stopped (the
 *     largest gap seen is reported);
 *   - a block a writer was in the middle of writing when it was killed may
 *     be left mixed (the kernel stops a write at a page boundary on a
 *     fatal signal): such blocks are "tainted"; every other block of the
 *     final file is uniform, and holds the byte of a writer that completed
 *     a write covering it (no completed write is lost to zeros);
 *   - under RS_COMPAT_STRICT=1, no read saw a mixed block that is not
 *     tainted (without the shim torn reads are only counted).
 * Prints "hammer ok" or "hammer FAIL: ...", and a line of counts.
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "compat.h"

#define BLK (64 * 1024)
#define MAXW 64
#define MAXB 4096
#define MAXBW 16        /* maxblocks */

struct wslot {
	_Atomic uint64_t ops;
	_Atomic uint64_t last_ns;       /* last completed operation */
	_Atomic int64_t inflight_b;     /* first block of the write in progress */
	_Atomic int32_t inflight_n;     /* its length in blocks, 0 if none */
	_Atomic int32_t pid;
	_Atomic uint64_t torn, reads, writes;
	_Atomic uint32_t phase;         /* 1 in pwrite, 2 in pread, 0 neither */
	_Atomic uint64_t phase_ns;      /* when the call began */
};

struct ctl {
	uint32_t nblocks, maxb;
	_Atomic int stop;
	struct wslot w[MAXW];
	/* Taint: the kill number of a killed writer whose write in progress
	 * covered the block, 0 once a write that began after the kill has
	 * completed over it.  taint_ns: when it was last tainted. */
	_Atomic uint32_t tainted[MAXB];
	_Atomic uint64_t taint_ns[MAXB];
	_Atomic uint8_t completed[MAXW][MAXB];
	/* reads that saw a mixed block, checked against taint later */
	_Atomic uint64_t suspects, excused;
};

static struct ctl *C;

static struct ctl *map_ctl(const char *path, int create)
{
	int fd = open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0600);
	struct ctl *c;

	if (fd < 0)
		die("open %s", path);
	if (create && ftruncate(fd, sizeof(struct ctl)) < 0)
		die("ftruncate %s", path);
	c = mmap(NULL, sizeof(struct ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c == MAP_FAILED)
		die("mmap %s", path);
	close(fd);
	return c;
}

struct suspect {
	uint64_t t;     /* when the read began */
	uint32_t b;
};

static void worker(const char *file, int slot)
{
	struct wslot *me = &C->w[slot];
	unsigned char *wb = xalloc((size_t)C->maxb * BLK), *rb = xalloc((size_t)C->maxb * BLK);
	uint64_t s = now_ns() ^ ((uint64_t)getpid() << 20) ^ (uint64_t)slot;
	struct suspect sus[64];
	int nsus = 0;
	int fd = open(file, O_RDWR);

	if (fd < 0)
		die("worker open %s", file);
	memset(wb, slot + 1, (size_t)C->maxb * BLK);
	atomic_store(&me->last_ns, now_ns());
	while (!atomic_load(&C->stop)) {
		uint32_t n = 1 + (uint32_t)(rnd(&s) % C->maxb);
		uint32_t b = (uint32_t)(rnd(&s) % (C->nblocks - n + 1));
		uint32_t rn = 1 + (uint32_t)(rnd(&s) % C->maxb);
		uint32_t rbk = (uint32_t)(rnd(&s) % (C->nblocks - rn + 1));
		uint32_t tg[MAXBW], pre[MAXBW];
		uint64_t now, t0;

		for (uint32_t k = 0; k < n; k++)
			tg[k] = atomic_load(&C->tainted[b + k]);
		atomic_store(&me->inflight_b, b);
		atomic_store(&me->inflight_n, (int32_t)n);
		atomic_store(&me->phase_ns, now_ns());
		atomic_store(&me->phase, 1);
		if (pwrite_full(fd, wb, (size_t)n * BLK, (off_t)b * BLK) < 0)
			die("worker %d pwrite", slot);
		atomic_store(&me->phase, 0);
		for (uint32_t k = 0; k < n; k++) {
			atomic_store(&C->completed[slot][b + k], 1);
			/* This write began after that kill: it covers the mix. */
			if (tg[k])
				atomic_compare_exchange_strong(&C->tainted[b + k], &tg[k], 0);
		}
		atomic_store(&me->inflight_n, 0);
		atomic_fetch_add(&me->writes, 1);

		for (uint32_t k = 0; k < rn; k++)
			pre[k] = atomic_load(&C->tainted[rbk + k]);
		t0 = now_ns();
		atomic_store(&me->phase_ns, t0);
		atomic_store(&me->phase, 2);
		if (pread_full(fd, rb, (size_t)rn * BLK, (off_t)rbk * BLK) < 0)
			die("worker %d pread", slot);
		atomic_store(&me->phase, 0);
		atomic_fetch_add(&me->reads, 1);
		for (uint32_t k = 0; k < rn; k++) {
			if (uniform(rb + (size_t)k * BLK, BLK))
				continue;
			atomic_fetch_add(&C->suspects, 1);
			if (pre[k] || atomic_load(&C->tainted[rbk + k]))
				atomic_fetch_add(&C->excused, 1);
			else if (nsus < 64)
				sus[nsus++] = (struct suspect){ t0, rbk + k };
			else
				atomic_fetch_add(&me->torn, 1);
		}
		/* A mixed block is also excused if a writer killed around the
		 * time of the read left it so: give the supervisor 500 ms to
		 * reap the writer and record that. */
		now = now_ns();
		for (int i = 0; i < nsus;) {
			if (now - sus[i].t < 500000000ull) {
				i++;
				continue;
			}
			if (atomic_load(&C->taint_ns[sus[i].b]) >= sus[i].t)
				atomic_fetch_add(&C->excused, 1);
			else
				atomic_fetch_add(&me->torn, 1);
			sus[i] = sus[--nsus];
		}
		atomic_fetch_add(&me->ops, 1);
		atomic_store(&me->last_ns, now_ns());
	}
	/* Whatever is still pending: decide now (the run is over). */
	for (int i = 0; i < nsus; i++) {
		if (atomic_load(&C->taint_ns[sus[i].b]) >= sus[i].t)
			atomic_fetch_add(&C->excused, 1);
		else
			atomic_fetch_add(&me->torn, 1);
	}
	close(fd);
	exit(0);
}

static const char *self, *file, *ctlpath;

/* A worker has made no progress for over a second: say where it is.  In a
 * call (and for how long), with its kernel state and wait channel: a
 * worker that is runnable and not in a call is only short of CPU. */
static void stall_report(int i, pid_t pid, uint64_t gap)
{
	struct wslot *w = &C->w[i];
	char path[64], wchan[64] = "?", stat[512] = "?", *st;
	uint32_t ph = atomic_load(&w->phase);
	uint64_t in = now_ns() - atomic_load(&w->phase_ns);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	if ((f = fopen(path, "r"))) {
		if (!fgets(wchan, sizeof(wchan), f))
			strcpy(wchan, "?");
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "r"))) {
		if (!fgets(stat, sizeof(stat), f))
			strcpy(stat, "?");
		fclose(f);
	}
	st = strrchr(stat, ')');
	fprintf(stderr, "hammer: worker %d (pid %d) no progress for %llu ms: ", i, (int)pid,
		(unsigned long long)(gap / 1000000));
	if (ph)
		fprintf(stderr, "inside %s for %llu ms", ph == 1 ? "pwrite" : "pread",
			(unsigned long long)(in / 1000000));
	else
		fprintf(stderr, "not in a call");
	fprintf(stderr, ", state %c, wchan %s\n", st && st[1] ? st[2] : '?', wchan);
	if (getenv("HAMMER_LOCKS_CMD") && system(getenv("HAMMER_LOCKS_CMD")) != 0)
		fprintf(stderr, "hammer: HAMMER_LOCKS_CMD failed\n");
}

static pid_t start(int slot, int exec_it)
{
	struct wslot *w = &C->w[slot];
	pid_t p;

	atomic_store(&w->inflight_n, 0);
	atomic_store(&w->last_ns, now_ns());
	p = fork();
	if (p < 0)
		die("fork");
	if (p == 0) {
		if (exec_it) {
			char num[16];

			snprintf(num, sizeof(num), "%d", slot);
			execl(self, self, "worker", file, ctlpath, num, (char *)NULL);
			die("exec %s", self);
		}
		worker(file, slot);
	}
	atomic_store(&w->pid, p);
	return p;
}

int main(int argc, char **argv)
{
	int procs, fd;
	double seconds;
	uint64_t kill_min, kill_max, max_gap_allowed, s = 0x1234567;
	uint64_t t_end, next_kill, max_gap = 0, kills = 0, restarts = 0;
	uint64_t stop_min, stop_max, stop_gap_min, stop_gap_max, next_stop, stops = 0;
	uint64_t stopped_until[MAXW] = { 0 }, stopped_at[MAXW] = { 0 };
	/* Time during which at least one worker was stopped, summed; and its
	 * value when each worker's progress was last seen. */
	uint64_t stop_accum = 0, prev_now = 0, seen_last[MAXW] = { 0 }, accum_at[MAXW] = { 0 };
	uint64_t max_gap_incl = 0, max_stop = 0;
	uint64_t writes = 0, reads = 0, torn = 0, ops = 0;
	int worst = -1, exec_next = 0;
	long mixed = 0, mixed_tainted = 0, lost = 0, tainted = 0, hung = 0;
	pid_t pids[MAXW];
	int reported[MAXW] = { 0 };
	char cpath[4200];
	unsigned char *buf;

	self = argv[0];
	if (argc == 5 && strcmp(argv[1], "worker") == 0) {
		C = map_ctl(argv[3], 0);
		worker(argv[2], atoi(argv[4]));
	}
	if (argc < 2)
		die("usage: hammer FILE [procs=N] [seconds=S] ...");
	file = argv[1];
	procs = (int)arg_num(argc, argv, "procs", 8);
	seconds = atof(arg_str(argc, argv, "seconds", "10"));
	kill_min = (uint64_t)arg_num(argc, argv, "kill_min_ms", 50);
	kill_max = (uint64_t)arg_num(argc, argv, "kill_max_ms", 400);
	max_gap_allowed = (uint64_t)arg_num(argc, argv, "max_gap_ms", 2000);
	stop_min = (uint64_t)arg_num(argc, argv, "stop_min_ms", 0);
	stop_max = (uint64_t)arg_num(argc, argv, "stop_max_ms", 0);
	stop_gap_min = (uint64_t)arg_num(argc, argv, "stop_gap_min_ms", 100);
	stop_gap_max = (uint64_t)arg_num(argc, argv, "stop_gap_max_ms", 600);
	if (stop_max < stop_min || stop_gap_max < stop_gap_min || (stop_max && !stop_gap_max))
		die("bad stop_*_ms");
	if (procs < 2 || procs > MAXW)
		die("procs must be 2..%d", MAXW);
	snprintf(cpath, sizeof(cpath), "%s.ctl", file);
	ctlpath = cpath;
	C = map_ctl(ctlpath, 1);
	C->nblocks = (uint32_t)arg_num(argc, argv, "blocks", 48);
	C->maxb = (uint32_t)arg_num(argc, argv, "maxblocks", 3);
	if (C->nblocks > MAXB || C->maxb < 1 || C->maxb > MAXBW || C->maxb > C->nblocks)
		die("bad blocks/maxblocks");
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s", file);
	if (ftruncate(fd, (off_t)C->nblocks * BLK) < 0)
		die("ftruncate");
	close(fd);

	for (int i = 0; i < procs; i++)
		pids[i] = start(i, (exec_next ^= 1));
	t_end = now_ns() + (uint64_t)(seconds * 1e9);
	next_kill = now_ns() + (kill_min + rnd(&s) % (kill_max - kill_min + 1)) * 1000000ull;
	next_stop = now_ns() + (stop_gap_min + rnd(&s) % (stop_gap_max - stop_gap_min + 1)) * 1000000ull;
	prev_now = now_ns();
	for (;;) {
		uint64_t now = now_ns();
		int any_stopped = 0;

		/* The stop storm: resume those whose time is up, stop another. */
		for (int i = 0; i < procs; i++) {
			if (!stopped_until[i])
				continue;
			if (now >= stopped_until[i]) {
				kill(pids[i], SIGCONT);
				if (now - stopped_at[i] > max_stop)
					max_stop = now - stopped_at[i];
				stopped_until[i] = 0;
			} else {
				any_stopped = 1;
			}
		}
		if (any_stopped)
			stop_accum += now - prev_now;
		prev_now = now;
		if (stop_max && now >= next_stop && now < t_end) {
			int v = (int)(rnd(&s) % (uint64_t)procs);

			if (!stopped_until[v] && kill(pids[v], SIGSTOP) == 0) {
				stopped_at[v] = now;
				stopped_until[v] = now + (stop_min + rnd(&s) % (stop_max - stop_min + 1)) *
								 1000000ull;
				stops++;
			}
			next_stop = now + (stop_gap_min + rnd(&s) % (stop_gap_max - stop_gap_min + 1)) *
						1000000ull;
		}
		for (int i = 0; i < procs; i++) {
			uint64_t last = atomic_load(&C->w[i].last_ns);
			uint64_t gap = now > last ? now - last : 0;

			if (last != seen_last[i]) {
				seen_last[i] = last;
				accum_at[i] = stop_accum;
			}
			if (gap > max_gap_incl)
				max_gap_incl = gap;
			/* Not counting the time some worker was stopped: a
			 * stopped holder stalls its waiters, as it must. */
			gap -= gap > stop_accum - accum_at[i] ? stop_accum - accum_at[i] : gap;
			if (gap > max_gap) {
				max_gap = gap;
				worst = i;
			}
			if (gap > 1000000000ull && !reported[i]) {
				reported[i] = 1;
				stall_report(i, pids[i], gap);
			} else if (gap < 1000000000ull) {
				reported[i] = 0;
			}
		}
		if (now >= t_end)
			break;
		if (now >= next_kill) {
			int v = (int)(rnd(&s) % (uint64_t)procs);
			int st;
			int32_t n;

			kill(pids[v], SIGKILL);
			waitpid(pids[v], &st, 0);
			if (stopped_until[v]) {
				if (now - stopped_at[v] > max_stop)
					max_stop = now - stopped_at[v];
				stopped_until[v] = 0;
			}
			n = atomic_load(&C->w[v].inflight_n);
			if (n > 0) {
				int64_t b = atomic_load(&C->w[v].inflight_b);

				for (int64_t k = b; k < b + n && k < (int64_t)C->nblocks; k++) {
					atomic_store(&C->taint_ns[k], now_ns());
					atomic_store(&C->tainted[k], (uint32_t)kills + 1);
				}
			}
			kills++;
			pids[v] = start(v, (exec_next ^= 1));
			seen_last[v] = atomic_load(&C->w[v].last_ns);
			accum_at[v] = stop_accum;
			restarts++;
			next_kill = now + (kill_min + rnd(&s) % (kill_max - kill_min + 1)) * 1000000ull;
		}
		sleep_ms(5);
	}
	atomic_store(&C->stop, 1);
	for (int i = 0; i < procs; i++)
		if (stopped_until[i])
			kill(pids[i], SIGCONT);
	for (int i = 0; i < procs; i++) {
		uint64_t t0 = now_ns();
		int st = 0;

		for (;;) {
			pid_t w = waitpid(pids[i], &st, WNOHANG);

			if (w == pids[i])
				break;
			if (now_ns() - t0 > 10000000000ull) {
				fprintf(stderr, "hammer: worker %d did not stop within 10 s\n", i);
				kill(pids[i], SIGKILL);
				waitpid(pids[i], &st, 0);
				hung++;
				break;
			}
			sleep_ms(2);
		}
		if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
			fprintf(stderr, "hammer: worker %d exited with %d\n", i, WEXITSTATUS(st));
			hung++;
		}
	}
	for (int i = 0; i < procs; i++) {
		ops += atomic_load(&C->w[i].ops);
		writes += atomic_load(&C->w[i].writes);
		reads += atomic_load(&C->w[i].reads);
		torn += atomic_load(&C->w[i].torn);
	}
	/* The final file. */
	buf = xalloc(BLK);
	fd = open(file, O_RDONLY);
	if (fd < 0)
		die("open %s", file);
	for (uint32_t b = 0; b < C->nblocks; b++) {
		int any = 0, t = atomic_load(&C->tainted[b]) != 0;

		tainted += t;
		if (pread_full(fd, buf, BLK, (off_t)b * BLK) < 0)
			die("final pread");
		for (int w = 0; w < procs; w++)
			any |= atomic_load(&C->completed[w][b]);
		if (!uniform(buf, BLK)) {
			if (t) {
				mixed_tainted++;
			} else {
				fprintf(stderr, "hammer: block %u is mixed (starts with %d)\n", b, buf[0]);
				mixed++;
			}
		} else if (buf[0] == 0 ? any && !t
			   : buf[0] > procs || !(atomic_load(&C->completed[buf[0] - 1][b]) || t)) {
			fprintf(stderr, "hammer: block %u holds %d, which no completed write put there\n",
				b, buf[0]);
			lost++;
		}
	}
	close(fd);
	unlink(ctlpath);
	fprintf(stderr,
		"hammer: procs=%d seconds=%.1f ops=%llu writes=%llu reads=%llu kills=%llu "
		"restarts=%llu stops=%llu max_stop_ms=%llu stopped_ms=%llu max_gap_ms=%llu (worker %d) "
		"max_gap_incl_stop_ms=%llu blocks=%u tainted=%ld "
		"mixed_tainted=%ld mixed=%ld lost=%ld torn_reads=%llu excused_reads=%llu hung=%ld shim=%d\n",
		procs, seconds, (unsigned long long)ops, (unsigned long long)writes,
		(unsigned long long)reads, (unsigned long long)kills, (unsigned long long)restarts,
		(unsigned long long)stops, (unsigned long long)(max_stop / 1000000),
		(unsigned long long)(stop_accum / 1000000), (unsigned long long)(max_gap / 1000000), worst,
		(unsigned long long)(max_gap_incl / 1000000), C->nblocks, tainted, mixed_tainted,
		mixed, lost, (unsigned long long)torn, (unsigned long long)atomic_load(&C->excused),
		hung, shim_loaded());
	if (max_gap / 1000000 > max_gap_allowed || mixed || lost || hung ||
	    (torn && strict_mode()) || kills == 0 || (stop_max && stops == 0)) {
		printf("hammer FAIL: max_gap_ms=%llu mixed=%ld lost=%ld hung=%ld torn_reads=%llu kills=%llu\n",
		       (unsigned long long)(max_gap / 1000000), mixed, lost, hung,
		       (unsigned long long)torn, (unsigned long long)kills);
		return 1;
	}
	printf("hammer ok\n");
	return 0;
}
