/*
 * mpiio_shared: MPI ranks writing one shared file through MPI-IO, the
 * N-to-1 checkpoint pattern, checked by rank 0.
 *
 *   mpicc -DRS_WITH_MPI -O2 -o mpiio_shared examples/mpiio_shared.c
 *   mpiexec -n 4 ./mpiio_shared FILE [block=BYTES] [iters=N]
 *   mpiexec -n 4 env LD_PRELOAD=$PWD/build/librangeshim.so ./mpiio_shared FILE
 *
 * (`make compat` builds and runs it.  Built with a plain C compiler, as
 * `make` does for every example, it only says how to build it.)
 *
 * Phases, each ended by a barrier and checked by rank 0:
 *   1. disjoint: rank r writes block r, iters times (MPI_File_write_at);
 *      block r must hold rank r's last pattern;
 *   2. overlapping: rank r writes blocks r and r+1 in one call, all ranks at
 *      once, iters times; every block must be uniform and hold the last
 *      pattern of one of the two ranks that cover it;
 *   3. the same in MPI atomic mode (MPI_File_set_atomicity(fh, 1)), with
 *      every rank also reading its neighbours' blocks between writes: each
 *      block of each read must be uniform (MPI's atomic mode promises it);
 *   4. the same reads and writes in the default (non-atomic) mode.  MPI
 *      does not promise whole writes here, but POSIX does for the pwrite
 *      and pread that ROMIO makes, so under rangeshim a torn read is a
 *      failure (RS_COMPAT_STRICT=1); without it, torn reads are counted.
 * Rank 0 prints one line "mpiio_shared ok ..." or "mpiio_shared FAIL: ...".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RS_WITH_MPI
#include <mpi.h>

static int rank, nranks;
static long block = 64 * 1024, iters = 20;
static MPI_File fh;
static char *path;

static int pat(int r, long i)
{
	return 1 + (int)((r * 37 + i) % 250);
}

static int uniform(const unsigned char *p, long n)
{
	for (long i = 1; i < n; i++)
		if (p[i] != p[0])
			return 0;
	return 1;
}

static void check(int rc, const char *what)
{
	if (rc != MPI_SUCCESS) {
		char msg[MPI_MAX_ERROR_STRING];
		int len = 0;

		MPI_Error_string(rc, msg, &len);
		fprintf(stderr, "rank %d: %s: %s\n", rank, what, msg);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
}

static void open_file(void)
{
	check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
			    &fh), "MPI_File_open");
}

/* Rank 0: read the whole file and check each block against the rule. */
static long verify(int overlap)
{
	long nblocks = nranks + (overlap ? 1 : 0), bad = 0;
	unsigned char *buf = malloc((size_t)(block * nblocks));
	MPI_Status st;

	check(MPI_File_read_at(fh, 0, buf, (int)(block * nblocks), MPI_BYTE, &st), "read_at");
	for (long k = 0; k < nblocks; k++) {
		unsigned char *b = buf + k * block;
		int ok;

		if (!overlap)
			ok = uniform(b, block) && b[0] == pat((int)k, iters - 1);
		else
			ok = uniform(b, block) &&
			     ((k < nranks && b[0] == pat((int)k, iters - 1)) ||
			      (k > 0 && b[0] == pat((int)k - 1, iters - 1)));
		if (!ok) {
			if (bad < 4)
				fprintf(stderr, "mpiio_shared: block %ld is wrong (first byte %d, %s)\n",
					k, b[0], uniform(b, block) ? "uniform" : "mixed");
			bad++;
		}
	}
	free(buf);
	return bad;
}

/* Overlapping writes; with reads, every rank also reads the two blocks
 * around its neighbour's boundary and counts blocks that are not uniform. */
static long overlap_phase(int with_reads)
{
	unsigned char *w = malloc((size_t)(2 * block)), *r = malloc((size_t)(2 * block));
	long torn = 0;
	MPI_Status st;

	for (long i = 0; i < iters; i++) {
		memset(w, pat(rank, i), (size_t)(2 * block));
		check(MPI_File_write_at(fh, (MPI_Offset)rank * block, w, (int)(2 * block), MPI_BYTE,
					&st), "write_at overlap");
		if (with_reads) {
			MPI_Offset at = (MPI_Offset)((rank + 1) % nranks) * block;

			check(MPI_File_read_at(fh, at, r, (int)(2 * block), MPI_BYTE, &st),
			      "read_at overlap");
			torn += !uniform(r, block);
			torn += !uniform(r + block, block);
		}
	}
	free(w);
	free(r);
	return torn;
}

int main(int argc, char **argv)
{
	unsigned char *w;
	long bad[4] = { 0, 0, 0, 0 }, torn3 = 0, torn4 = 0, sum;
	int strict;
	MPI_Status st;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (argc < 2) {
		if (rank == 0)
			fprintf(stderr, "usage: mpiio_shared FILE [block=BYTES] [iters=N]\n");
		MPI_Finalize();
		return 2;
	}
	path = argv[1];
	for (int i = 2; i < argc; i++) {
		if (strncmp(argv[i], "block=", 6) == 0)
			block = atol(argv[i] + 6);
		else if (strncmp(argv[i], "iters=", 6) == 0)
			iters = atol(argv[i] + 6);
	}
	strict = getenv("RS_COMPAT_STRICT") && getenv("RS_COMPAT_STRICT")[0] == '1';
	if (rank == 0)
		MPI_File_delete(path, MPI_INFO_NULL);
	MPI_Barrier(MPI_COMM_WORLD);
	open_file();

	/* 1. disjoint */
	w = malloc((size_t)block);
	for (long i = 0; i < iters; i++) {
		memset(w, pat(rank, i), (size_t)block);
		check(MPI_File_write_at(fh, (MPI_Offset)rank * block, w, (int)block, MPI_BYTE, &st),
		      "write_at disjoint");
	}
	free(w);
	check(MPI_File_sync(fh), "sync");
	MPI_Barrier(MPI_COMM_WORLD);
	check(MPI_File_sync(fh), "sync");
	if (rank == 0)
		bad[0] = verify(0);
	MPI_Barrier(MPI_COMM_WORLD);

	/* 2. overlapping, non-atomic, writes only */
	overlap_phase(0);
	check(MPI_File_sync(fh), "sync");
	MPI_Barrier(MPI_COMM_WORLD);
	check(MPI_File_sync(fh), "sync");
	if (rank == 0)
		bad[1] = verify(1);
	MPI_Barrier(MPI_COMM_WORLD);

	/* 3. overlapping, atomic mode, with reads */
	check(MPI_File_set_atomicity(fh, 1), "set_atomicity");
	torn3 = overlap_phase(1);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		bad[2] = verify(1);
	MPI_Barrier(MPI_COMM_WORLD);
	check(MPI_File_set_atomicity(fh, 0), "set_atomicity");

	/* 4. overlapping, non-atomic, with reads */
	torn4 = overlap_phase(1);
	check(MPI_File_sync(fh), "sync");
	MPI_Barrier(MPI_COMM_WORLD);
	check(MPI_File_sync(fh), "sync");
	if (rank == 0)
		bad[3] = verify(1);
	check(MPI_File_close(&fh), "close");

	MPI_Allreduce(MPI_IN_PLACE, &torn3, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(MPI_IN_PLACE, &torn4, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	sum = bad[0] + bad[1] + bad[2] + bad[3];
	if (rank == 0) {
		fprintf(stderr, "mpiio_shared: ranks=%d block=%ld iters=%ld bad blocks %ld/%ld/%ld/%ld "
			"torn reads atomic=%ld nonatomic=%ld\n", nranks, block, iters, bad[0], bad[1],
			bad[2], bad[3], torn3, torn4);
		if (sum || torn3 || (strict && torn4))
			printf("mpiio_shared FAIL: bad blocks %ld/%ld/%ld/%ld, torn reads atomic=%ld "
			       "non-atomic=%ld\n", bad[0], bad[1], bad[2], bad[3], torn3, torn4);
		else
			printf("mpiio_shared ok ranks=%d\n", nranks);
		fflush(stdout);
	}
	MPI_Finalize();
	return sum || torn3 || (strict && torn4) ? 1 : 0;
}

#else /* !RS_WITH_MPI */

int main(void)
{
	fprintf(stderr, "mpiio_shared: built without MPI; build it with "
		"`mpicc -DRS_WITH_MPI examples/mpiio_shared.c` (make compat does)\n");
	return 77;
}

#endif
