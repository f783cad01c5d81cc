#!/bin/sh
# The scale table: many processes on one file, many files in one process,
# idle grants on other files beside two writers of one, and ordinary tools, each as a ratio to the same work without the shim,
# measured in one run with the modes interleaved round by round (the
# median of the per-round ratios).  docs/benchmarks.md records a run.
#
#   sh tests/bench/scale.sh BUILD [procs|files|idle|iov|tools]...
#
# iov: one process, a pwritev of 1024 16-byte iovecs on the heap
# (tests/bench/iovec) to a file in BENCH_SHM (default /dev/shm),
# SCALE_IOV_CALLS calls (default 20000) a round.
# SCALE_PROCS (default 1,4,16,64,128,256), SCALE_CALLS (total calls per
# cell, default 20000), SCALE_FILES (default 1,100,1000,10000),
# SCALE_IDLE (idle grants, default 900), SCALE_IDLE_CALLS (writes per
# writer, default 5000), SCALE_ROUNDS (default 3).  The tools row needs tar, rsync and git
# (Debian packages tar, rsync, git): installed when run as root with
# apt-get, otherwise named, and the row is skipped.
set -eu
B=$(cd "$1" && pwd)
shift
LIB=$B/librangeshim.so
PR=$B/tests/bench/procrand
MF=$B/tests/bench/manyfiles
IG=$B/tests/bench/idlegrants
IOV=$B/tests/bench/iovec
IOV_CALLS=${SCALE_IOV_CALLS:-20000}
IOV_FILE=${BENCH_SHM:-/dev/shm}/rs-iov.$$
PROCS=${SCALE_PROCS:-1,4,16,64,128,256}
CALLS=${SCALE_CALLS:-20000}
FILES=${SCALE_FILES:-1,100,1000,10000}
IDLE=${SCALE_IDLE:-900}
IDLE_CALLS=${SCALE_IDLE_CALLS:-5000}
ROUNDS=${SCALE_ROUNDS:-3}
SECTIONS=${*:-procs files idle iov tools}
DIR=$(mktemp -d "${BENCH_DIR:-/tmp}/rs-scale.XXXXXX")
export RANGESHIM_SHM=/rangeshim-scale.$$
trap 'rm -rf "$DIR" "/dev/shm/rangeshim-scale.$$" "$IOV_FILE"' EXIT

# median of the numbers on stdin
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "nan" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f\n", a / b; else print "nan" }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
now() { date +%s.%N; }

# procrand cell: prints us/call; fails the run on a torn read or error
pr() {
	out=$("$@") || { echo "scale.sh: $* failed: $out" >&2; exit 1; }
	case $out in *torn=0*|*bad=0*) ;; *) echo "scale.sh: damage: $* -> $out" >&2; exit 1 ;; esac
	echo "$out" | awk '{ print $1 }'
}

if echo "$SECTIONS" | grep -qw procs; then
	echo "## Processes on one file ($CALLS calls in all; us per call; ratio to unlocked, median of $ROUNDS rounds)"
	echo
	echo "| workload | procs | unlocked us | shim / unlocked | OFD / unlocked |"
	echo "|---|---|---|---|---|"
	for w in rand own; do
		for p in $(echo "$PROCS" | tr , ' '); do
			c=$((CALLS / p)); [ "$c" -ge 1 ] || c=1
			rs=; ro=; u=
			for r in $(seq "$ROUNDS"); do
				tu=$(pr "$PR" "$DIR/f" "$p" "$c" "$w")
				ts=$(LD_PRELOAD=$LIB pr "$PR" "$DIR/f" "$p" "$c" "$w")
				to=$(pr "$PR" "$DIR/f" "$p" "$c" "$w" ofd)
				u="$u $tu"
				rs="$rs $(ratio "$ts" "$tu")"
				ro="$ro $(ratio "$to" "$tu")"
			done
			echo "| $w | $p | $(echo $u | tr ' ' '\n' | median) | $(echo $rs | tr ' ' '\n' | median) | $(echo $ro | tr ' ' '\n' | median) |"
		done
	done
	echo
fi

if echo "$SECTIONS" | grep -qw files; then
	echo "## Files open in one process ($CALLS random 4 KiB pread/pwrite; ratio to unlocked, median of $ROUNDS rounds)"
	echo
	echo "| files | unlocked us | shim / unlocked |"
	echo "|---|---|---|"
	for n in $(echo "$FILES" | tr , ' '); do
		rs=; u=
		for r in $(seq "$ROUNDS"); do
			tu=$("$MF" "$DIR" "$n" "$CALLS" | awk '{ print $1 }')
			ts=$(LD_PRELOAD=$LIB "$MF" "$DIR" "$n" "$CALLS" | awk '{ print $1 }')
			u="$u $tu"
			rs="$rs $(ratio "$ts" "$tu")"
		done
		echo "| $n | $(echo $u | tr ' ' '\n' | median) | $(echo $rs | tr ' ' '\n' | median) |"
	done
	echo
fi

# Two processes writing random 4 KiB blocks of one 16 MiB region (their
# grants turn exact: one table pass per write), with and without a third
# process that holds cached grants on IDLE other files: an acquisition's
# cost should follow its own file's grants, not the table's.
if echo "$SECTIONS" | grep -qw idle; then
	echo "## Idle grants on other files (2 writers x $IDLE_CALLS random 4 KiB pwrites of one region, under the shim; us per write, wall and the writers' CPU, with and without a process holding $IDLE idle grants on other files; median of $ROUNDS rounds, alternating)"
	echo
	echo "| idle grants | wall us without | wall us with | with / without | CPU us without | CPU us with | with / without |"
	echo "|---|---|---|---|---|---|---|"
	rs=; rc=; a=; b=; ac=; bc=
	for r in $(seq "$ROUNDS"); do
		for order in 0 1; do
			[ $(( (r + order) % 2 )) = 0 ] && n=0 || n=$IDLE
			rm -rf "$DIR/ig"; mkdir "$DIR/ig"
			out=$(LD_PRELOAD=$LIB "$IG" "$DIR/ig" "$n" "$IDLE_CALLS") ||
				{ echo "scale.sh: idlegrants failed: $out" >&2; exit 1; }
			w=$(echo "$out" | awk '{ print $1 }')
			c=$(echo "$out" | awk '{ sub("cpu=", "", $3); print $3 }')
			if [ "$n" = 0 ]; then t0=$w; c0=$c; else t1=$w; c1=$c; fi
		done
		a="$a $t0"; b="$b $t1"; ac="$ac $c0"; bc="$bc $c1"
		rs="$rs $(ratio "$t1" "$t0")"
		rc="$rc $(ratio "$c1" "$c0")"
	done
	m() { echo $1 | tr ' ' '\n' | median; }
	echo "| $IDLE | $(m "$a") | $(m "$b") | $(m "$rs") | $(m "$ac") | $(m "$bc") | $(m "$rc") |"
	echo
fi

if echo "$SECTIONS" | grep -qw iov; then
	echo "## A 1024-iovec pwritev from the heap (one process, $IOV_CALLS calls; us per call; ratio to unlocked, median of $ROUNDS rounds)"
	echo
	echo "| unlocked us | shim us | shim / unlocked |"
	echo "|---|---|---|"
	rs=; u=; s=
	for r in $(seq "$ROUNDS"); do
		tu=$("$IOV" "$IOV_FILE" "$IOV_CALLS" | awk '{ print $1 }')
		ts=$(LD_PRELOAD=$LIB "$IOV" "$IOV_FILE" "$IOV_CALLS" | awk '{ print $1 }')
		u="$u $tu"
		s="$s $ts"
		rs="$rs $(ratio "$ts" "$tu")"
	done
	echo "| $(echo $u | tr ' ' '\n' | median) | $(echo $s | tr ' ' '\n' | median) | $(echo $rs | tr ' ' '\n' | median) |"
	echo
fi

need() {
	command -v "$1" >/dev/null 2>&1 && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 && return 0
	fi
	echo "scale.sh: $1 is not installed; run: sudo apt-get install $2 (tools row skipped)" >&2
	return 1
}

# one tool run, timed: tool NAME SHIM(0|1)
tool() {
	pre=
	[ "$2" = 1 ] && pre=$LIB
	rm -rf "$DIR/t"; mkdir -p "$DIR/t"
	case $1 in
	"tar cf") t0=$(now); LD_PRELOAD=$pre tar cf "$DIR/t/a.tar" -C /usr include ;;
	"tar xf") t0=$(now); LD_PRELOAD=$pre tar xf "$DIR/src.tar" -C "$DIR/t" ;;
	"rsync -a") t0=$(now); LD_PRELOAD=$pre rsync -a /usr/include/ "$DIR/t/inc/" ;;
	"git clone") t0=$(now); LD_PRELOAD=$pre git clone -q --no-hardlinks "$DIR/repo" "$DIR/t/c" ;;
	esac
	secs "$t0" "$(now)"
}

if echo "$SECTIONS" | grep -qw tools && need tar tar && need rsync rsync && need git git; then
	tar cf "$DIR/src.tar" -C /usr include
	SRCREPO=${SCALE_GIT_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
	git clone -q --bare --no-hardlinks "$SRCREPO" "$DIR/repo" 2>/dev/null ||
		{ mkdir -p "$DIR/r" && tar xf "$DIR/src.tar" -C "$DIR/r" &&
		  git -C "$DIR/r" init -q && git -C "$DIR/r" add -A &&
		  git -C "$DIR/r" -c user.name=b -c user.email=b@b commit -qm b &&
		  git clone -q --bare "$DIR/r" "$DIR/repo"; }
	echo "## Ordinary tools (/usr/include; wall time ratio to unlocked, median of $ROUNDS rounds)"
	echo
	echo "| tool | unlocked s | shim / unlocked |"
	echo "|---|---|---|"
	for t in "tar cf" "tar xf" "rsync -a" "git clone"; do
		rs=; u=
		for r in $(seq "$ROUNDS"); do
			tu=$(tool "$t" 0)
			ts=$(tool "$t" 1)
			u="$u $tu"
			rs="$rs $(ratio "$ts" "$tu")"
		done
		echo "| $t | $(echo $u | tr ' ' '\n' | median) | $(echo $rs | tr ' ' '\n' | median) |"
	done
	echo
fi
