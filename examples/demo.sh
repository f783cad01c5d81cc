#!/bin/sh
# shellcheck disable=SC2030,SC2031 # RANGESHIM_LOCK is exported in subshells on purpose
# demo.sh BUILD_DIR: what `make demo` runs, after `make all`.
#
# 1. Torn reads: a 1 MiB pwrite() racing a 1 MiB pread() of the same range,
#    on tmpfs (/dev/shm) and on /tmp, without and with rangeshim.  Without it
#    Linux hands readers a mix of two writes; with it no read may be torn.
# 2. Disjoint writers: 4 threads writing their own regions of one file in
#    64 KiB blocks, unlocked, under rangeshim, and under RANGESHIM_LOCK=mutex
#    (one lock per file, the baseline a range lock has to beat).
#
# Exits non-zero if any read is torn under rangeshim, or any block comes back
# wrong: either one is a bug in rangeshim, not in the demo.
set -eu

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: sh examples/demo.sh BUILD_DIR" >&2
	exit 2
fi
# Absolute, so the preload path still resolves if a child changes directory.
B=$(cd "$1" && pwd)
EX=$B/examples
LIB=$B/librangeshim.so

# Tunables, kept small so the whole demo stays under about 30 s.
SECONDS_PER_RUN=2       # each torn_read run
READERS=1
SW_REGION=64M           # per shared_writer thread, per pass
SW_REPEAT=4             # passes, so each run writes 1 GiB
SW_ROUNDS=2             # best of N, runs of each mode interleaved

say() { printf '%s\n' "$*"; }
fail() { say "demo: $*" >&2; exit 1; }

for prog in torn_read shared_writer; do
	[ -x "$EX/$prog" ] || fail "$EX/$prog not found; run 'make all' first"
done
[ -f "$LIB" ] || fail "$LIB not found; run 'make all' first"

say "rangeshim demo: $B"
if [ -x "$B/rangeshim" ]; then
	say "shim runs use: $B/rangeshim run -- CMD"
else
	say "note: $B/rangeshim is missing; shim runs use: env LD_PRELOAD=$LIB CMD"
fi

# Run "$@" under the shim, the way a user would.
shim() {
	if [ -x "$B/rangeshim" ]; then
		"$B/rangeshim" run -- "$@"
	else
		env LD_PRELOAD="$LIB" "$@"
	fi
}
plain() { "$@"; }

# field KEY TEXT: the value of KEY=VALUE on the machine-readable line.
field() {
	printf '%s\n' "$2" | awk -v k="$1" '
		{ for (i = 1; i <= NF; i++) {
			n = index($i, "=")
			if (n > 1 && substr($i, 1, n - 1) == k) v = substr($i, n + 1)
		} }
		END { if (v == "") exit 1; print v }'
}

# The file-system type for the summary; falls back to the path.
fstype() {
	t=$(df -PT "$1" 2>/dev/null | awk 'NR == 2 { print $2 }') || t=
	printf '%s\n' "${t:-$1}"
}

TORN_SHM=/dev/shm/rangeshim-demo-torn.$$
TORN_TMP=/tmp/rangeshim-demo-torn.$$
SW_FILE=/tmp/rangeshim-demo-writer.$$
cleanup() { rm -f "$TORN_SHM" "$TORN_TMP" "$SW_FILE"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ -d /dev/shm ] || fail "/dev/shm does not exist; the tmpfs row needs it"

say ""
say "== Torn reads: 1 MiB pwrite racing 1 MiB pread, $READERS reader(s), ${SECONDS_PER_RUN} s per run =="

# torn RUNNER FILE: run torn_read, echo its lines, leave "reads torn writes"
# in $torn_result.
torn() {
	runner=$1
	file=$2
	rc=0
	out=$($runner "$EX/torn_read" --block 1M --readers "$READERS" \
		--seconds "$SECONDS_PER_RUN" --file "$file") || rc=$?
	[ "$rc" -eq 0 ] || fail "torn_read ($runner) on $file failed with exit status $rc"
	printf '  %-6s %s\n' "$runner" "$(printf '%s\n' "$out" | head -n 1)"
	reads=$(field reads "$out") || fail "no reads= in torn_read output"
	torn_n=$(field torn "$out") || fail "no torn= in torn_read output"
	writes=$(field writes "$out") || fail "no writes= in torn_read output"
	torn_result="$reads $torn_n $writes"
}

# Rows for the summary: "fs plain_reads plain_torn shim_reads shim_torn shim_writes"
torn_rows=
bad_shim=
for file in "$TORN_SHM" "$TORN_TMP"; do
	fs=$(fstype "$(dirname "$file")")
	torn plain "$file"
	# shellcheck disable=SC2086 # split into its three numbers
	set -- $torn_result
	p_reads=$1 p_torn=$2
	torn shim "$file"
	# shellcheck disable=SC2086
	set -- $torn_result
	s_reads=$1 s_torn=$2 s_writes=$3
	torn_rows="$torn_rows$fs $p_reads $p_torn $s_reads $s_torn $s_writes
"
	if [ "$p_torn" -eq 0 ]; then
		say "  note: no read tore without rangeshim on $fs this time; the race" \
		    "is timing-dependent (try again, or on an idle machine)"
	fi
	if [ "$s_torn" -gt 0 ]; then
		bad_shim="$bad_shim $fs:$s_torn/$s_reads"
	fi
	if [ "$s_writes" -eq 0 ]; then
		say "  warning: under rangeshim the writer finished no write on $fs;" \
		    "a clean result proves nothing"
	fi
done

say ""
# Probe O_DIRECT with a tiny run; many file systems (and some tmpfs
# versions) refuse it, and the comparison is still meaningful buffered.
if "$EX/shared_writer" --direct --threads 1 --region 64k --block 64k \
	--file "$SW_FILE" --quiet >/dev/null 2>&1; then
	direct=--direct
	io_mode=O_DIRECT
else
	direct=
	io_mode=buffered
	say "note: /tmp does not accept O_DIRECT; measuring buffered writes instead"
fi
sw_fs=$(fstype /tmp)
say "== Disjoint writers: 4 threads x $SW_REGION x $SW_REPEAT passes, 64 KiB blocks, $io_mode, $sw_fs (/tmp), best of $SW_ROUNDS =="

# writer MODE: one shared_writer run; leaves MB/s in $mbps.
writer() {
	mode=$1
	rc=0
	case $mode in
	unlocked)
		out=$(plain "$EX/shared_writer" --threads 4 --region "$SW_REGION" \
			--block 64k --repeat "$SW_REPEAT" $direct --file "$SW_FILE") || rc=$?
		;;
	rangeshim)
		# export inside $(...): assignments prefixed to a function call
		# need not be exported in POSIX sh.
		out=$(export RANGESHIM_LOCK=range
		      shim "$EX/shared_writer" --threads 4 \
			--region "$SW_REGION" --block 64k --repeat "$SW_REPEAT" \
			$direct --file "$SW_FILE") || rc=$?
		;;
	mutex)
		out=$(export RANGESHIM_LOCK=mutex
		      shim "$EX/shared_writer" --threads 4 \
			--region "$SW_REGION" --block 64k --repeat "$SW_REPEAT" \
			$direct --file "$SW_FILE") || rc=$?
		;;
	esac
	printf '  %-9s %s\n' "$mode" "$(printf '%s\n' "$out" | head -n 1)"
	if [ "$rc" -eq 1 ]; then
		fail "FAIL: shared_writer ($mode) read back bad blocks:" \
		     "$(field bad_blocks "$out" || echo '?') of them"
	fi
	[ "$rc" -eq 0 ] || fail "shared_writer ($mode) failed with exit status $rc"
	mbps=$(field mbps "$out") || fail "no mbps= in shared_writer output"
}

best_unlocked=0 best_range=0 best_mutex=0
round=1
while [ "$round" -le "$SW_ROUNDS" ]; do
	writer unlocked
	best_unlocked=$(awk -v a="$best_unlocked" -v b="$mbps" 'BEGIN { print (b > a ? b : a) }')
	writer rangeshim
	best_range=$(awk -v a="$best_range" -v b="$mbps" 'BEGIN { print (b > a ? b : a) }')
	writer mutex
	best_mutex=$(awk -v a="$best_mutex" -v b="$mbps" 'BEGIN { print (b > a ? b : a) }')
	round=$((round + 1))
done

say ""
say "== Summary =="
say ""
say "Torn reads (1 MiB blocks, $READERS reader(s), ${SECONDS_PER_RUN} s per run):"
printf '%s' "$torn_rows" | awk '
	BEGIN { printf "  %-10s %-28s %s\n", "fs", "without rangeshim", "with rangeshim" }
	NF == 6 {
		pct = 0
		if ($2 > 0) pct = 100 * $3 / $2
		if (pct > 0 && pct < 0.1) p = sprintf("%d/%d torn (<0.1%%)", $3, $2)
		else p = sprintf("%d/%d torn (%.1f%%)", $3, $2, pct)
		s = sprintf("%d/%d torn", $5, $4)
		printf "  %-10s %-28s %s\n", $1, p, s
	}'
say ""
say "Disjoint writers (4 threads, 64 KiB blocks, $io_mode, MB/s, best of $SW_ROUNDS):"
awk -v u="$best_unlocked" -v r="$best_range" -v m="$best_mutex" 'BEGIN {
	rr = 0; mr = 0
	if (u > 0) { rr = r / u; mr = m / u }
	printf "  %-10s %-10s %-10s %-20s %s\n", "unlocked", "rangeshim", "mutex",
	       "rangeshim/unlocked", "mutex/unlocked"
	printf "  %-10.1f %-10.1f %-10.1f %-20.2f %.2f\n", u, r, m, rr, mr
}'
say ""
say "These machines are small and shared: compare the ratios, not the MB/s."

if [ -n "$bad_shim" ]; then
	say ""
	fail "FAIL: torn reads under rangeshim (fs:torn/reads):$bad_shim." \
	     "rangeshim must make every read atomic; this is a bug."
fi
say "OK: no torn reads under rangeshim."
