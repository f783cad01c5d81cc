#!/bin/bash
# The compatibility suite: real programs, run without and with the shim.
#
#   tests/compat/run.sh BUILD [CASE...]        (make compat)
#
# Each case runs twice, in a directory of its own under $COMPAT_WORK
# (default BUILD/compat-work, on the disk the build lives on):
#   plain  without the shim;
#   shim   with LD_PRELOAD=BUILD/librangeshim.so, a node lock table of its
#          own (RANGESHIM_SHM=/rangeshim-compat.PID, removed at the end)
#          and RS_COMPAT_STRICT=1, which makes the checks that only the
#          shim can make hold (no torn read) fail instead of just count.
# A case passes when both runs exit 0, print the same result lines on
# stdout, and the shim printed no diagnostic ("rangeshim[PID]: ...").
# One line per case: "PASS name", "FAIL name: why" or "SKIP name: why"
# (a failure's evidence goes to stderr, indented, just before its line);
# the last line is "N passed, N failed" (", N skipped" when some were).
# Exit status 1 if any case failed.
#
# Missing programs are installed with apt-get when running as root;
# otherwise the command to run is printed and the cases that need them
# are skipped.  COMPAT_KEEP=1 keeps the work directory after a clean run.
# COMPAT_STATS=1 runs every case with RANGESHIM_STATS (per-thread counters,
# on the inline path too) and adds to each PASS line how many calls the
# shim locked ("io_calls", from the processes that exited normally).
set -u

# ---- the cases (run as: run.sh --case NAME MODE DIR) -------------------

fio_job() {	# ENGINE, then extra fio options
	local engine=$1
	shift
	fio --name=shared --filename="$PWD/shared.dat" --ioengine="$engine" \
	    --rw=randwrite --bs=16k --size=4m --offset_increment=4m --numjobs=4 \
	    --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting \
	    "$@"
}

fio_case() {	# ENGINE threads|procs
	local engine=$1 how=$2 extra=""
	[ "$how" = threads ] && extra=--thread
	# shellcheck disable=SC2086
	fio_job "$engine" $extra --output=write.log || { cat write.log; return 1; }
	grep -E 'err= *[1-9]' write.log && return 1
	echo "fio $engine $how: 4 jobs wrote and verified 4 MiB each"
	# Read the whole file back once more, after every writer has finished.
	# shellcheck disable=SC2086
	fio_job "$engine" $extra --verify_only --output=verify.log || { cat verify.log; return 1; }
	grep -E 'err= *[1-9]' verify.log && return 1
	echo "fio $engine $how: verify_only of the final file ok"
}

case_fio_mixed() {
	cat > mixed.fio <<-EOF
	[global]
	filename=$PWD/mixed.dat
	ioengine=psync
	bs=16k
	size=4m
	verify=crc32c
	verify_fatal=1
	; regions 2 and 3 are written first, then read and verified below
	[prep]
	rw=write
	offset=8m
	size=8m
	[writers]
	stonewall
	rw=randwrite
	numjobs=2
	offset=0
	offset_increment=4m
	do_verify=1
	[readers]
	rw=randread
	numjobs=2
	offset=8m
	offset_increment=4m
	loops=3
	[readwrite]
	rw=randrw
	rwmixread=50
	offset=16m
	thread=1
	EOF
	fio mixed.fio --output=mixed.log || { cat mixed.log; return 1; }
	grep -E 'err= *[1-9]' mixed.log && return 1
	echo "fio mixed: writers, verifying readers and a read/write job ran clean"
}

for e in psync sync pvsync pvsync2 vsync; do
	for h in threads procs; do
		eval "case_fio_${e}_$h() { fio_case $e $h; }"
	done
done

sqlite_case() {	# journal mode
	local jm=$1 p i
	sqlite3 db.sqlite "PRAGMA journal_mode=$jm; CREATE TABLE t(p INTEGER, i INTEGER, v TEXT);" >/dev/null || return 1
	for p in 1 2 3 4; do
		{
			echo ".timeout 60000"
			echo ".bail on"
			for i in $(seq 1 150); do
				echo "BEGIN IMMEDIATE; INSERT INTO t VALUES($p, $i, printf('%0200d', $i)); COMMIT;"
			done
		} | sqlite3 db.sqlite >"ins.$p.log" 2>&1 &
	done
	# A reader alongside.
	for i in $(seq 1 40); do
		sqlite3 -cmd ".timeout 60000" db.sqlite "SELECT count(*) FROM t;" >/dev/null || echo "reader failed"
	done
	wait
	for p in 1 2 3 4; do
		if [ -s "ins.$p.log" ]; then
			echo "inserter $p said:"; cat "ins.$p.log"
		fi
	done
	sqlite3 db.sqlite "PRAGMA journal_mode; PRAGMA integrity_check; SELECT p, count(*), sum(i) FROM t GROUP BY p ORDER BY p;"
}

case_sqlite_rollback() { sqlite_case DELETE; }
case_sqlite_wal() { sqlite_case WAL; }

case_mpiio() {
	mpiexec -n 4 "$MPIIO" "$PWD/mpi.dat" block=262144 iters=20
}

case_python() {
	"$PYTHON" "$SRC/py_io.py" "$PWD"
}

case_coreutils() {
	local k
	seq 1 300000 > nums
	dd if=nums of=d1 bs=4k status=none
	dd if=nums of=d2 bs=1M iflag=fullblock conv=fsync status=none
	dd if=nums of=d3 bs=1000 skip=7 seek=3 count=500 status=none
	dd if=/dev/zero of=d4 bs=64k count=16 status=none
	dd if=nums of=d4 bs=64k seek=2 count=4 conv=notrunc status=none
	cp nums c1
	cp --reflink=never nums c2
	cp --sparse=always d4 c3
	cat nums nums > c4
	mkdir tree
	split -b 64k -d nums tree/part.
	split -l 5000 nums tree/lines.
	cat tree/part.* | cmp - nums || return 1
	touch -d @1700000000 tree tree/*
	tar cf t.tar --sort=name --owner=0 --group=0 --numeric-owner tree
	mkdir x
	tar xf t.tar -C x
	diff -r tree x/tree || return 1
	tar czf t.tgz tree
	mkdir y
	tar xzf t.tgz -C y
	diff -r tree y/tree || return 1
	sort -r nums -o s1
	sort -n s1 -o s1
	cmp s1 nums || return 1
	sort -S 1M --parallel=2 -T . -o s2 c4
	# four dd processes into disjoint 1 MiB regions of one file at once
	for k in 0 1 2 3; do
		dd if=nums of=cc bs=64k count=16 skip="$k" seek=$((k * 16)) conv=notrunc status=none &
	done
	wait
	sha256sum d1 d2 d3 d4 c1 c2 c3 c4 s1 s2 cc t.tar | sed 's/  / /'
	ls tree | wc -l
}

case_shell() {
	echo hello > f
	echo world >> f
	cat f
	exec 3<>g
	echo "through fd 3" >&3
	exec 3>&-
	cat g
	cat < f > h 2>&1
	{ echo out; echo err 1>&2; } > both 2>&1
	sort both
	cat > here <<-EOF
	a here document
	of two lines
	EOF
	cat here
	read -r line < f
	printf '%s\n' "$line"
	while read -r l; do echo "<$l>"; done < here > loop
	cat loop
	( exec >sub; echo "from a subshell" )
	cat sub
	echo "x" | tee -a f > /dev/null
	wc -l < f
	: > f
	wc -c < f
}

case_appenders() {
	local k i n ok=1
	for k in 1 2 3 4 5 6 7 8; do
		# 400 lines of exactly 64 bytes: dd bs=64 writes each with one write()
		for i in $(seq 1 400); do
			printf 'appender %d line %05d %s\n' "$k" "$i" "........................................."
		done > "lines.$k"
	done
	for k in 1 2 3 4 5 6 7 8; do
		dd if="lines.$k" of=app bs=64 oflag=append conv=notrunc status=none &
	done
	for k in 1 2 3 4 5 6 7 8; do
		( for i in $(seq 1 150); do echo "sh $k $i" >> app2; done ) &
	done
	for k in 1 2 3 4 5 6 7 8; do
		( for i in $(seq 1 40); do printf 'cat %d %d\n' "$k" "$i" | cat >> app3; done ) &
	done
	wait
	n=$(wc -l < app)
	echo "dd appenders: $n lines"
	[ "$(grep -c -E '^appender [1-8] line [0-9]{5} \.{41}$' app)" = 3200 ] || { echo "mangled dd lines"; ok=0; }
	[ "$(sort app | uniq | wc -l)" = 3200 ] || { echo "lost or repeated dd lines"; ok=0; }
	echo "shell appenders: $(wc -l < app2) lines, $(sort -u app2 | grep -c -E '^sh [1-8] [0-9]+$') distinct intact"
	echo "cat appenders: $(wc -l < app3) lines, $(sort -u app3 | grep -c -E '^cat [1-8] [0-9]+$') distinct intact"
	[ "$ok" = 1 ]
}

case_git() {
	export HOME=$PWD GIT_CONFIG_NOSYSTEM=1
	export GIT_AUTHOR_NAME=compat GIT_AUTHOR_EMAIL=compat@example.org
	export GIT_COMMITTER_NAME=compat GIT_COMMITTER_EMAIL=compat@example.org
	export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
	local i
	git init -q -b main repo || return 1
	cd repo || return 1
	seq 1 20000 > a.txt
	mkdir d
	for i in $(seq 1 60); do seq "$i" 500 > "d/f$i"; done
	git add -A && git commit -q -m one || return 1
	seq 5 20005 > a.txt
	rm d/f7
	git add -A && git commit -q -m two || return 1
	git log --format='%H %s'
	git status --porcelain
	git gc -q || return 1
	git fsck --full --strict 2>&1 && echo "fsck ok"
	git clone -q --no-local . ../clone || return 1
	git -C ../clone log --format='%H %s'
	git -C ../clone diff --stat HEAD~1 | tail -1
	git repack -adq && git count-objects -v | grep -E '^(count|in-pack)'
}

check_nm() {	# BINARY SYMBOL...
	local bin=$1 s
	shift
	for s in "$@"; do
		nm -D "$bin" | grep -qE " U $s(@|$)" || { echo "$bin does not call $s"; return 1; }
	done
	echo "$(basename "$bin") binds to: $*"
}

check_stats() {	# minimum io_calls under the shim (from RANGESHIM_STATS files)
	[ "$MODE" = shim ] || return 0
	local n
	n=$(cat rs-stats.*.json 2>/dev/null | grep -o '"io_calls": [0-9]*' | awk '{s += $2} END {print s + 0}')
	echo "shim io_calls=$n" >&2
	[ "$n" -ge "$1" ] || { echo "the shim locked only $n calls (expected at least $1)"; return 1; }
}

case_build_fortify() {
	stats_on
	check_nm "$BIN/rw_basic.fortify" __read_chk __pread_chk __open_2 || return 1
	"$BIN/rw_basic.fortify" "$PWD/f" 1 || return 1
	check_stats 1000
}

case_build_fob() {
	stats_on
	check_nm "$BIN/rw_basic.fob" pread64 pwrite64 lseek64 open64 || return 1
	"$BIN/rw_basic.fob" "$PWD/f" 1 || return 1
	check_nm "$BIN/rw_basic.fortify64" __pread64_chk __read_chk __open64_2 pwrite64 || return 1
	"$BIN/rw_basic.fortify64" "$PWD/g" 1 || return 1
	check_stats 2000
}

case_build_plain() {
	stats_on
	check_nm "$BIN/rw_basic.plain" pread pwrite read write readv writev lseek || return 1
	"$BIN/rw_basic.plain" "$PWD/f" 1 || return 1
	check_stats 1000
}

case_forkexec() { "$BIN/forkexec" "$PWD/f" iters=300 threads=4; }
case_closeall() {
	# on tmpfs, where an uncoordinated 1 MiB read tears most often
	local shm rc
	shm=$(mktemp -d /dev/shm/rangeshim-compat-closeall.XXXXXX) || return 1
	"$BIN/closeall" "$shm/f" seconds=1
	rc=$?
	rm -rf "$shm"
	return $rc
}
case_spawn() { "$BIN/spawn" "$PWD/f" iters=300 threads=4; }

case_sigkill() {
	local s=10
	[ "$MODE" = plain ] && s=3
	"$BIN/hammer" "$PWD/f" procs=8 seconds="$s" blocks=48 maxblocks=3 max_gap_ms=2000
}

allowed_warn() {
	case $1 in
	sigkill) echo 'NOT coordinated in this process: stores through a writable MAP_SHARED mapping of a coordinated file \([0-9]+, first: file [0-9]+:[0-9]+:[0-9]+ .*/f\.ctl\)$' ;;
	esac
}

case_sigstorm() { "$BIN/sigstorm" "$PWD" seconds=2 threads=4; }
case_fdchaos() { "$BIN/fdchaos" "$PWD" seconds=3; }
case_limits_files() { "$BIN/limits" files "$PWD" n=1500; }
case_limits_procfiles() { "$BIN/limits" procfiles "$PWD" procs=4 n=700; }
case_limits_threads() { "$BIN/limits" threads "$PWD" n=2000; }
case_limits_top() {
	local shm
	"$BIN/limits" top "$PWD" || return 1
	# and on tmpfs
	shm=$(mktemp -d /dev/shm/rangeshim-compat-top.XXXXXX) || return 1
	"$BIN/limits" top "$shm"
	local rc=$?
	rm -rf "$shm"
	return $rc
}

case_cli() {
	# `rangeshim run` and `rangeshim locks` around a real program
	local n
	if [ "$MODE" = plain ]; then
		dd if=/dev/zero of=f bs=64k count=32 status=none && echo "dd ok"
		return
	fi
	unset LD_PRELOAD
	"$BUILD/rangeshim" run --stats="$PWD/cli.%p.json" -- dd if=/dev/zero of=f bs=64k count=32 status=none &&
	    echo "dd ok"
	n=$(cat cli.*.json 2>/dev/null | grep -o '"io_calls": [0-9]*' | awk '{s += $2} END {print s + 0}')
	[ "$n" -ge 32 ] || { echo "rangeshim run: io_calls=$n, expected at least 32"; return 1; }
	"$BUILD/rangeshim" locks --shm "$RANGESHIM_SHM" >/dev/null || return 1
}

stats_on() {
	[ "$MODE" = shim ] && export RANGESHIM_STATS="$PWD/rs-stats.%p.json"
	return 0
}

# ---- the runner ---------------------------------------------------------

ALL_CASES="fio_psync_threads fio_psync_procs fio_sync_threads fio_sync_procs
fio_pvsync_threads fio_pvsync_procs fio_pvsync2_threads fio_pvsync2_procs
fio_vsync_threads fio_vsync_procs fio_mixed sqlite_rollback sqlite_wal mpiio
python coreutils shell appenders git build_plain build_fortify build_fob
forkexec spawn closeall sigkill sigstorm fdchaos limits_files limits_procfiles
limits_threads limits_top cli"

needs() {	# the commands a case needs
	case $1 in
	fio_*) echo fio ;;
	sqlite_*) echo sqlite3 ;;
	mpiio) echo "mpicc mpiexec" ;;
	python) echo python3 ;;
	coreutils) echo "dd sort split tar gzip sha256sum cmp diff" ;;
	git) echo git ;;
	build_*) echo nm ;;
	esac
}

package_of() {
	case $1 in
	fio) echo fio ;;
	sqlite3) echo sqlite3 ;;
	mpicc) echo libmpich-dev ;;
	mpiexec) echo mpich ;;
	python3) echo python3 ;;
	git) echo git ;;
	tar) echo tar ;;
	gzip) echo gzip ;;
	cmp | diff) echo diffutils ;;
	nm) echo binutils ;;
	*) echo coreutils ;;
	esac
}

have() { command -v "$1" >/dev/null 2>&1; }

if [ "${1:-}" = --case ]; then
	# Inner: run one case in its directory.
	NAME=$2 MODE=$3
	export MODE
	cd "$4" || exit 2
	"case_$NAME"
	exit $?
fi

BUILD=$(cd "${1:?usage: run.sh BUILD [CASE...]}" && pwd) || exit 2
shift
SRC=$(cd "$(dirname "$0")" && pwd)
LIB=$BUILD/librangeshim.so
BIN=$BUILD/compat
WORK=${COMPAT_WORK:-$BUILD/compat-work}
SHM=/rangeshim-compat.$$
CASE_TIMEOUT=${CASE_TIMEOUT:-240}
export BUILD SRC BIN
[ -f "$LIB" ] || { echo "run.sh: $LIB is missing (make all)" >&2; exit 2; }
[ -x "$BIN/forkexec" ] || { echo "run.sh: $BIN is not built (make compat)" >&2; exit 2; }

cases=${*:-$ALL_CASES}

# Install what is missing, once.
missing=""
for c in $cases; do
	for cmd in $(needs "$c"); do
		have "$cmd" || missing="$missing $(package_of "$cmd")"
	done
done
missing=$(echo "$missing" | tr ' ' '\n' | sort -u | tr '\n' ' ' | sed 's/^ *//; s/ *$//')
if [ -n "$missing" ]; then
	if [ "$(id -u)" = 0 ] && have apt-get; then
		echo "compat: installing $missing"
		export DEBIAN_FRONTEND=noninteractive
		# shellcheck disable=SC2086
		{ apt-get update -qq && apt-get install -y -qq $missing; } >"/tmp/compat-apt.$$.log" 2>&1 ||
		    { echo "compat: apt-get failed:"; tail -5 "/tmp/compat-apt.$$.log"; }
		rm -f "/tmp/compat-apt.$$.log"
	else
		echo "compat: missing programs; install them with:"
		echo "    sudo apt-get install -y $missing"
	fi
fi
hash -r

# A Python from the distribution if there is one: version managers' shims
# are scripts that may pick an interpreter built elsewhere.
if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=$(command -v python3 || echo python3); fi
export PYTHON

rm -rf "$WORK"
mkdir -p "$WORK" || exit 2
trap 'rm -f "/dev/shm${SHM}"' EXIT
trap 'exit 130' INT TERM

# The MPI example, built with mpicc (make builds it with cc, as a stub).
MPIIO=$WORK/bin/mpiio_shared
export MPIIO
case " $(echo $cases) " in
*" mpiio "*)
	if have mpicc; then
		mkdir -p "$WORK/bin"
		mpicc -DRS_WITH_MPI -O2 -o "$MPIIO" "$SRC/../../examples/mpiio_shared.c" 2>"$WORK/mpicc.log" ||
		    { echo "compat: mpicc failed:"; cat "$WORK/mpicc.log"; }
	fi ;;
esac

passed=0 failed=0 skipped=0
: > "$WORK/summary"

result() {	# PASS|FAIL|SKIP NAME [why]
	local line="$1 $2"
	[ -n "${3:-}" ] && line="$line: $3"
	echo "$line"
	echo "$line" >> "$WORK/summary"
	case $1 in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
}

show_tail() {	# FILE: the last lines, indented, on stderr
	tail -n "${2:-8}" "$1" 2>/dev/null | sed 's/^/    | /' >&2
}

run_mode() {	# NAME MODE -> exit status; output in $WORK/NAME/MODE.{out,err}
	local name=$1 mode=$2 dir="$WORK/$1/$2" rc t0 t1
	mkdir -p "$dir"
	t0=$(date +%s.%N)
	if [ "$mode" = shim ]; then
		if [ "${COMPAT_STATS:-0}" = 1 ]; then
			export RANGESHIM_STATS="$dir/rs-stats.%p.json"
		fi
		env LD_PRELOAD="$LIB" RANGESHIM_SHM="$SHM" RS_COMPAT_STRICT=1 \
		    timeout -k 10 "$CASE_TIMEOUT" bash "$SRC/run.sh" --case "$name" "$mode" "$dir" \
		    >"$dir.out" 2>"$dir.err" </dev/null
	else
		env -u LD_PRELOAD -u RS_COMPAT_STRICT \
		    timeout -k 10 "$CASE_TIMEOUT" bash "$SRC/run.sh" --case "$name" "$mode" "$dir" \
		    >"$dir.out" 2>"$dir.err" </dev/null
	fi
	rc=$?
	unset RANGESHIM_STATS
	t1=$(date +%s.%N)
	echo "$name $mode rc=$rc $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')s" >> "$WORK/times"
	return $rc
}

for c in $cases; do
	if ! declare -f "case_$c" >/dev/null; then
		result FAIL "$c" "no such case"
		continue
	fi
	miss=""
	for cmd in $(needs "$c"); do have "$cmd" || miss="$miss $cmd"; done
	if [ -n "$miss" ]; then
		result SKIP "$c" "needs$miss"
		continue
	fi
	if [ "$c" = mpiio ] && [ ! -x "$MPIIO" ]; then
		result SKIP "$c" "examples/mpiio_shared.c did not build with mpicc"
		continue
	fi
	run_mode "$c" plain
	rc_plain=$?
	run_mode "$c" shim
	rc_shim=$?
	d="$WORK/$c"
	# A case may name the one line it expects: hammer's control block is
	# a shared writable mapping of a file in the work directory, which the
	# shim rightly names at exit.
	allow=$(allowed_warn "$c")
	warn=$(grep -hE '^rangeshim\[[0-9]+\]' "$d/shim.err" "$d/shim.out" 2>/dev/null |
	    { if [ -n "$allow" ]; then grep -vE "$allow"; else cat; fi; } | head -3)
	if [ "$rc_plain" = 124 ] || [ "$rc_plain" = 137 ]; then
		show_tail "$d/plain.err"
		result FAIL "$c" "timed out after ${CASE_TIMEOUT}s without the shim (see $d/plain.*)"
	elif [ "$rc_plain" != 0 ]; then
		show_tail "$d/plain.out"
		show_tail "$d/plain.err"
		result FAIL "$c" "fails without the shim too (exit $rc_plain; see $d/plain.*)"
	elif [ "$rc_shim" = 124 ] || [ "$rc_shim" = 137 ]; then
		show_tail "$d/shim.err"
		result FAIL "$c" "timed out after ${CASE_TIMEOUT}s with the shim (see $d/shim.*)"
	elif [ "$rc_shim" != 0 ]; then
		show_tail "$d/shim.out"
		show_tail "$d/shim.err"
		result FAIL "$c" "exit $rc_shim with the shim, 0 without (see $d/shim.*)"
	elif ! cmp -s "$d/plain.out" "$d/shim.out"; then
		diff "$d/plain.out" "$d/shim.out" | head -10 | sed 's/^/    | /' >&2
		result FAIL "$c" "results differ with the shim (see $d/*.out)"
	elif [ -n "$warn" ]; then
		echo "$warn" | sed 's/^/    | /' >&2
		result FAIL "$c" "the shim printed diagnostics"
	elif [ "${COMPAT_STATS:-0}" = 1 ]; then
		n=$(cat "$d"/shim/rs-stats.*.json 2>/dev/null | grep -o '"io_calls": [0-9]*' |
		    awk '{s += $2} END {print s + 0}')
		result PASS "$c" "io_calls=$n"
	else
		result PASS "$c"
	fi
done

if [ "$failed" = 0 ] && [ "${COMPAT_KEEP:-0}" != 1 ]; then
	rm -rf "$WORK"
fi
if [ "$skipped" != 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" = 0 ]
