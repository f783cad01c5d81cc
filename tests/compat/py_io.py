"""Python's own I/O under the shim: threads with os.pwrite/os.pread, and
multiprocessing (fork, spawn and forkserver) writing one shared file.

    python3 py_io.py DIR

Prints deterministic result lines (compared by run.sh with the run without
the shim) and exits 0 if every check passed.  Torn reads are counted on
stderr; under RS_COMPAT_STRICT=1 (the run with the shim) they fail.
"""
import hashlib
import multiprocessing as mp
import os
import sys
import threading

BLK = 64 * 1024
STRICT = os.environ.get("RS_COMPAT_STRICT") == "1"


def threads(d):
    path = os.path.join(d, "threads.dat")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, b"\0" * BLK * 12, 0)
    torn = [0]
    errors = []
    stop = threading.Event()

    def writer(t):
        try:
            for i in range(300):
                own = bytes([t + 1]) * BLK
                os.pwrite(fd, own, (4 + t) * BLK)
                if os.pread(fd, BLK, (4 + t) * BLK) != own:
                    errors.append("thread %d read back something else" % t)
                # overlapping: two blocks starting at block 0 or 1
                os.pwrite(fd, bytes([0x80 + t]) * 2 * BLK, (i % 2) * BLK)
        except Exception as e:  # noqa: BLE001 - report anything
            errors.append("thread %d: %r" % (t, e))

    def reader():
        while not stop.is_set():
            b = os.pread(fd, 3 * BLK, 0)
            # each whole write covers blocks [0,2) or [1,3): within a
            # block every byte comes from one write
            for k in range(3):
                blk = b[k * BLK:(k + 1) * BLK]
                if blk.count(blk[0]) != len(blk):
                    torn[0] += 1

    ws = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    rs = [threading.Thread(target=reader) for _ in range(2)]
    for t in ws + rs:
        t.start()
    for t in ws:
        t.join()
    stop.set()
    for t in rs:
        t.join()
    own = b"".join(bytes([t + 1]) * BLK for t in range(8))
    if os.pread(fd, 8 * BLK, 4 * BLK) != own:
        errors.append("own blocks wrong at the end")
    os.close(fd)
    print("py threads: torn=%d" % torn[0], file=sys.stderr)
    if STRICT and torn[0]:
        errors.append("%d torn reads under the shim" % torn[0])
    return errors


def chunk(i):
    return hashlib.sha256(b"chunk %d" % i).digest() * (BLK // 32)


def mp_worker(args):
    path, i = args
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, chunk(i), i * BLK)
    got = os.pread(fd, BLK, i * BLK)
    os.close(fd)
    afd = os.open(path + ".log", os.O_WRONLY | os.O_APPEND)
    os.write(afd, b"worker %06d pid %08d done\n" % (i, os.getpid() % 100000000))
    os.close(afd)
    return got == chunk(i)


def multiproc(d, method):
    path = os.path.join(d, "mp-%s.dat" % method)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
    os.close(os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    ctx = mp.get_context(method)
    n = 64
    with ctx.Pool(4) as pool:
        oks = pool.map(mp_worker, [(path, i) for i in range(n)], chunksize=4)
    with open(path, "rb") as f:
        data = f.read()
    with open(path + ".log", "rb") as f:
        lines = f.read().splitlines()
    errors = []
    if not all(oks):
        errors.append("%s: a worker read back something else" % method)
    if data != b"".join(chunk(i) for i in range(n)):
        errors.append("%s: the file is wrong" % method)
    done = sorted(int(l.split()[1]) for l in lines if len(l) == 31)
    if done != list(range(n)) or len(lines) != n:
        errors.append("%s: %d log lines, %d intact" % (method, len(lines), len(done)))
    print("py multiprocessing %s: sha256=%s lines=%d" %
          (method, hashlib.sha256(data).hexdigest()[:16], len(lines)))
    return errors


def main():
    d = sys.argv[1]
    errors = threads(d)
    print("py threads: done")
    for method in ("fork", "spawn", "forkserver"):
        errors += multiproc(d, method)
    for e in errors:
        print("py_io FAIL:", e)
    if errors:
        sys.exit(1)
    print("py_io ok")


if __name__ == "__main__":
    main()
