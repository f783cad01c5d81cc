/*
 * pthread_cancel of threads that are inside locked I/O calls: a thread
 * cancelled inside the real pwrite must not leave its range lock (or node
 * grant) held, or the next writer of that range waits for ever.
 *
 *   cancel_probe FILE [ROUNDS]
 * Prints "rounds=N" and "verdict=PASS" when every round's follow-up write
 * completed; the test runs it under a timeout, so a leaked lock shows as a
 * hang.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fd;

static void *writer(void *arg)
{
	static __thread char buf[1 << 20];

	(void)arg;
	for (;;)
		if (pwrite(fd, buf, sizeof(buf), 0) < 0)
			return NULL;
	return NULL;
}

static void *reader(void *arg)
{
	static __thread char buf[1 << 20];

	(void)arg;
	for (;;)
		if (pread(fd, buf, sizeof(buf), 0) < 0)
			return NULL;
	return NULL;
}

int main(int argc, char **argv)
{
	int rounds = argc > 2 ? atoi(argv[2]) : 20;
	char small[4096];
	int done = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: cancel_probe FILE [ROUNDS]\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	memset(small, 'x', sizeof(small));
	for (int i = 0; i < rounds; i++) {
		pthread_t t[2];

		pthread_create(&t[0], NULL, writer, NULL);
		pthread_create(&t[1], NULL, reader, NULL);
		usleep(2000 + (unsigned)(i % 5) * 700);
		pthread_cancel(t[0]);
		pthread_cancel(t[1]);
		pthread_join(t[0], NULL);
		pthread_join(t[1], NULL);
		/* Would wait for ever behind a lock a cancelled thread kept. */
		if (pwrite(fd, small, sizeof(small), 0) != (ssize_t)sizeof(small) ||
		    pread(fd, small, sizeof(small), 4096) < 0)
			break;
		done++;
	}
	close(fd);
	unlink(argv[1]);
	printf("rounds=%d\nverdict=%s\n", done, done == rounds ? "PASS" : "FAIL");
	return done == rounds ? 0 : 1;
}
