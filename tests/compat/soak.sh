#!/bin/bash
# The soak: the fault and load tests at once, under the shim, for a while.
#
#   SOAK_SECONDS=60 tests/compat/soak.sh BUILD        (make soak)
#
# Everything shares one node lock table of its own
# (RANGESHIM_SHM=/rangeshim-soak.PID) and runs with RS_COMPAT_STRICT=1:
#   - hammer: 8 processes on overlapping ranges of one file, a random one
#     SIGKILLed every 50-400 ms and restarted, and a random one SIGSTOPped
#     every 100-600 ms for 50-500 ms, then SIGCONTed, for the whole time.
#     A stopped holder stalls its waiters for as long as it is stopped (it
#     must: a lock is not given up while its holder lives), so the stall
#     limit applies to progress gaps not counting the time when a worker
#     was stopped; the gaps including it are reported as well;
#   - sigstorm: the SIGALRM storm whose handlers write, for the whole time;
#   - fdchaos: close/dup2/reopen against I/O, for the whole time;
#   - a loop, until the time is up, of: limits files (1500 files in one
#     process), limits procfiles (4 processes x 700 files), limits threads
#     (2000 threads), limits top, forkexec, spawn, a fio write+verify job
#     (if fio is installed) and sqlite3 inserters (if sqlite3 is);
#   - `rangeshim locks` reading the table every second.
# The 2000-thread step uses a node table of its own unless
# SOAK_ONE_TABLE=1: its threads, queued on one range, hold every one of
# the table's 1024 grant slots at once and stall the other processes for
# seconds (reported as a shim issue; SOAK_ONE_TABLE=1 shows it).
# At the end it prints what ran (operations, kills, files, threads,
# rounds) and what was verified, and "N passed, N failed".
set -u
BUILD=$(cd "${1:?usage: soak.sh BUILD}" && pwd) || exit 2
SECONDS_WANTED=${SOAK_SECONDS:-60}
BIN=$BUILD/compat
LIB=$BUILD/librangeshim.so
WORK=${SOAK_WORK:-$BUILD/soak-work}
SHM=/rangeshim-soak.$$
[ -f "$LIB" ] && [ -x "$BIN/hammer" ] || { echo "soak.sh: build first (make soak)" >&2; exit 2; }

rm -rf "$WORK"
mkdir -p "$WORK"/{hammer,sigstorm,fdchaos,loop,top} || exit 2
trap 'rm -f "/dev/shm${SHM}" "/dev/shm${SHM}-threads"; rm -rf /dev/shm/rangeshim-soak-top.$$' EXIT
export LD_PRELOAD=$LIB RANGESHIM_SHM=$SHM RS_COMPAT_STRICT=1

echo "soak: ${SECONDS_WANTED}s under the shim, node table $SHM, work in $WORK"
start=$(date +%s)
deadline=$((start + SECONDS_WANTED))

HAMMER_LOCKS_CMD="env -u LD_PRELOAD '$BUILD/rangeshim' locks --shm '$SHM' | tail -4 >&2" \
"$BIN/hammer" "$WORK/hammer/f" procs=8 seconds="$SECONDS_WANTED" blocks=64 maxblocks=4 \
    kill_min_ms=50 kill_max_ms=400 max_gap_ms=2000 \
    stop_min_ms=50 stop_max_ms=500 stop_gap_min_ms=100 stop_gap_max_ms=600 \
    >"$WORK/hammer.out" 2>"$WORK/hammer.err" &
hammer_pid=$!
"$BIN/sigstorm" "$WORK/sigstorm" seconds="$SECONDS_WANTED" threads=4 usec=200 storm_gap_us=100 \
    >"$WORK/sigstorm.out" 2>"$WORK/sigstorm.err" &
sigstorm_pid=$!
"$BIN/fdchaos" "$WORK/fdchaos" seconds="$SECONDS_WANTED" \
    >"$WORK/fdchaos.out" 2>"$WORK/fdchaos.err" &
fdchaos_pid=$!

passed=0 failed=0
declare -A rounds fails
record() {	# NAME STATUS LOG
	rounds[$1]=$(( ${rounds[$1]:-0} + 1 ))
	if [ "$2" != 0 ]; then
		fails[$1]=$(( ${fails[$1]:-0} + 1 ))
		echo "soak: $1 failed (exit $2):"
		tail -5 "$3" | sed 's/^/    | /'
	fi
}

(
	# the table's reader, once a second
	while [ "$(date +%s)" -lt "$deadline" ]; do
		if env -u LD_PRELOAD "$BUILD/rangeshim" locks --shm "$SHM" >/dev/null 2>>"$WORK/locks.err"; then
			echo ok >>"$WORK/locks.ok"
		else
			echo "rangeshim locks failed" >>"$WORK/locks.err"
		fi
		sleep 1
	done
) &
locks_pid=$!

round=0
while [ "$(date +%s)" -lt "$deadline" ]; do
	round=$((round + 1))
	d=$WORK/loop/$round
	mkdir -p "$d"
	for step in files procfiles threads top forkexec spawn fio sqlite; do
		[ "$(date +%s)" -lt "$deadline" ] || break
		log=$d/$step.log
		case $step in
		files) timeout 120 "$BIN/limits" files "$d" n=1500 >"$log" 2>&1 ;;
		procfiles) timeout 120 "$BIN/limits" procfiles "$d" procs=4 n=700 >"$log" 2>&1 ;;
		threads)
			if [ "${SOAK_ONE_TABLE:-0}" = 1 ]; then
				timeout 120 "$BIN/limits" threads "$d" n=2000 >"$log" 2>&1
			else
				RANGESHIM_SHM=$SHM-threads timeout 120 "$BIN/limits" threads "$d" n=2000 >"$log" 2>&1
			fi ;;
		top)
			mkdir -p "/dev/shm/rangeshim-soak-top.$$"
			timeout 120 "$BIN/limits" top "/dev/shm/rangeshim-soak-top.$$" >"$log" 2>&1 ;;
		forkexec) timeout 120 "$BIN/forkexec" "$d/fe" iters=200 threads=4 >"$log" 2>&1 ;;
		spawn) timeout 120 "$BIN/spawn" "$d/sp" iters=200 threads=4 >"$log" 2>&1 ;;
		fio)
			command -v fio >/dev/null || continue
			timeout 120 fio --name=soak --filename="$d/fio.dat" --ioengine=psync --rw=randwrite \
			    --bs=16k --size=4m --offset_increment=4m --numjobs=4 --verify=crc32c \
			    --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
			    --group_reporting >"$log" 2>&1 ;;
		sqlite)
			command -v sqlite3 >/dev/null || continue
			(
				cd "$d" || exit 1
				sqlite3 db "PRAGMA journal_mode=WAL; CREATE TABLE t(p, i);" >/dev/null || exit 1
				for p in 1 2 3; do
					{ echo ".timeout 60000"; echo ".bail on"
					  for i in $(seq 1 100); do echo "INSERT INTO t VALUES($p, $i);"; done
					} | sqlite3 db &
				done
				wait
				[ "$(sqlite3 db 'PRAGMA integrity_check; SELECT count(*) FROM t;' | tr '\n' ' ')" = "ok 300 " ]
			) >"$log" 2>&1 ;;
		esac
		record "$step" $? "$log"
	done
	# keep the disk use flat
	[ "${fails[*]:-}" ] || rm -rf "$d"
done

wait "$hammer_pid"; record hammer $? "$WORK/hammer.out"
wait "$sigstorm_pid"; record sigstorm $? "$WORK/sigstorm.out"
wait "$fdchaos_pid"; record fdchaos $? "$WORK/fdchaos.out"
wait "$locks_pid"
locks_failures=$(grep -c "failed" "$WORK/locks.err" 2>/dev/null)
record locks "${locks_failures:-0}" "$WORK/locks.err"
elapsed=$(( $(date +%s) - start ))

num() {	# KEY FILE: the value of KEY=N in FILE (first one)
	grep -o "$1=[0-9]*" "$2" 2>/dev/null | head -1 | cut -d= -f2
}

echo
echo "soak: ran ${elapsed}s"
echo "  hammer:   $(num procs "$WORK/hammer.err") processes, $(num ops "$WORK/hammer.err") operations" \
     "($(num writes "$WORK/hammer.err") pwrites, $(num reads "$WORK/hammer.err") preads of 64-256 KiB)," \
     "$(num kills "$WORK/hammer.err") SIGKILLs and restarts," \
     "$(num stops "$WORK/hammer.err") SIGSTOP/SIGCONTs (longest stop $(num max_stop_ms "$WORK/hammer.err") ms," \
     "a worker stopped $(num stopped_ms "$WORK/hammer.err") ms in all)"
echo "            verified: longest stall of a live writer $(num max_gap_ms "$WORK/hammer.err") ms not counting" \
     "stopped time (limit 2000), $(num max_gap_incl_stop_ms "$WORK/hammer.err") ms counting it," \
     "$(num mixed "$WORK/hammer.err") mixed and $(num lost "$WORK/hammer.err") lost blocks of $(num blocks "$WORK/hammer.err")" \
     "(+$(num mixed_tainted "$WORK/hammer.err") left mixed by a killed writer), $(num torn_reads "$WORK/hammer.err") torn reads"
stalls=$(grep -c "no progress" "$WORK/hammer.err" 2>/dev/null)
if [ "${stalls:-0}" != 0 ]; then
	echo "            $stalls times a writer went over 1 s without progress; the first:"
	grep -m1 "no progress" "$WORK/hammer.err" | sed 's/^/              /'
fi
echo "  sigstorm: $(num handlers "$WORK/sigstorm.err") SIGALRM handlers that wrote, $(num ops "$WORK/sigstorm.err") thread operations"
echo "            verified: every handler record and appended line intact, $(num eintr_on_files "$WORK/sigstorm.err") EINTR" \
     "and $(num short "$WORK/sigstorm.err") short transfers on files, $(num torn "$WORK/sigstorm.err") torn reads, EINTR on a pipe as without the shim"
echo "  fdchaos:  $(num ops "$WORK/fdchaos.err") I/O calls against $(num chaos_ops "$WORK/fdchaos.err") close/dup2/reopen operations"
echo "            verified: $(num unexpected "$WORK/fdchaos.err") unexpected results, $(num mixed_blocks "$WORK/fdchaos.err") mixed blocks," \
     "a clean race afterwards, no descriptor leaked"
for s in files procfiles threads top forkexec spawn fio sqlite; do
	[ -n "${rounds[$s]:-}" ] || continue
	case $s in
	files) what="1500 files open in one process (node table: 1024 grant slots)" ;;
	procfiles) what="4 processes x 700 shared files" ;;
	threads) what="2000 threads on one file$([ "${SOAK_ONE_TABLE:-0}" = 1 ] || echo " (own node table)")" ;;
	top) what="calls at LLONG_MAX and the file system's largest offset" ;;
	forkexec) what="200 forks/execs while 4 threads write" ;;
	spawn) what="200 posix_spawn/vfork children while 4 threads write" ;;
	fio) what="fio 4 jobs write+verify" ;;
	sqlite) what="sqlite3 WAL, 3 inserting processes, integrity_check" ;;
	esac
	printf '  %-10s %3d rounds, %d failed: %s\n' "$s:" "${rounds[$s]}" "${fails[$s]:-0}" "$what"
done
echo "  rangeshim locks: $(wc -l < "$WORK/locks.ok" 2>/dev/null || echo 0) reads of the table, ${locks_failures:-0} failed"
# hammer's control block is a shared writable mapping of a file in the
# work directory, which the shim rightly names at exit: the one line
# expected.
diagnostics() {
	grep -hE '^rangeshim\[[0-9]+\]' "$WORK"/*.err "$WORK"/loop/*/*.log 2>/dev/null |
	    grep -vE 'NOT coordinated in this process: stores through a writable MAP_SHARED mapping of a coordinated file \([0-9]+, first: file [0-9]+:[0-9]+:[0-9]+ .*/hammer/f\.ctl\)$'
}
if diagnostics | head -3 | grep -q .; then
	echo "soak: the shim printed diagnostics:"
	diagnostics | sort | uniq -c | head -5
	fails[diagnostics]=1
	rounds[diagnostics]=1
fi
for k in "${!rounds[@]}"; do
	if [ "${fails[$k]:-0}" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
[ "$failed" = 0 ] && rm -rf "$WORK"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
