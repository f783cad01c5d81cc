#!/bin/sh
# Run each libFuzzer harness for FUZZ_SECONDS (default 30):
#   tests/fuzz/run.sh BUILD                  (make fuzz)
# Corpora live in BUILD/fuzz/corpus-NAME and grow from run to run; a crash
# leaves its input as BUILD/fuzz/crash-* and fails the run.
set -u
build=$(cd "${1:?usage: run.sh BUILD}" && pwd) || exit 2
secs=${FUZZ_SECONDS:-30}
dir=$build/fuzz
passed=0
failed=0

seed() {	# NAME: a few starting inputs
	s=$dir/seeds-$1
	mkdir -p "$s"
	case $1 in
	fuzz_config)
		printf 'node\0range\0/tmp:/scratch/job*\0/tmp/rs.%%p.json\0debug\0/rangeshim-1000\0/scratch/job1/x' >"$s/valid"
		printf 'off\0mutex\0relative:/ok\0001\0003\0/bad/name\0/tmp' >"$s/mixed"
		printf 'bogus\0\0/a/[b*\0\0loud\0' >"$s/bad"
		;;
	fuzz_segment)
		printf 'T' >"$s/empty-table"
		if command -v python3 >/dev/null 2>&1; then
			# grant 0 HELD: users 1, state 1, mode EXSH, owner 3, dev 1,
			# ino 2, [0, 4096); process slot 3 LIVE
			python3 - "$s/one-grant" <<-'PY'
			import struct, sys
			g = struct.pack("<6I5Q", 1, 1, 2, 3, 0, 0, 1, 2, 0, 4096, 0)
			p = struct.pack("<I", 1)
			data = b"T" + struct.pack("<IB", 20480, len(g)) + g + struct.pack("<IB", 4096 + 3 * 64, len(p)) + p
			open(sys.argv[1], "wb").write(data)
			PY
		fi
		;;
	esac
}

for f in fuzz_segment fuzz_config; do
	bin=$dir/$f
	if [ ! -x "$bin" ]; then
		echo "FAIL $f: $bin is not built"
		failed=$((failed + 1))
		continue
	fi
	seed "$f"
	mkdir -p "$dir/corpus-$f"
	log=$dir/$f.log
	echo "== $f for ${secs}s"
	(cd "$dir" && ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -timeout=10 \
	    -rss_limit_mb=2048 -close_fd_mask=2 -print_final_stats=1 -artifact_prefix="$dir/" \
	    "corpus-$f" "seeds-$f") >"$log" 2>&1
	rc=$?
	runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
	cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
	units=$(ls "$dir/corpus-$f" | wc -l)
	if [ "$rc" = 0 ] && ! grep -qE 'ERROR: (AddressSanitizer|libFuzzer)|runtime error' "$log"; then
		echo "PASS $f: ${runs:-?} inputs in ${secs}s, ${cov:-?} coverage points, corpus of $units, no crash"
		passed=$((passed + 1))
	else
		grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -8 | sed 's/^/    | /'
		echo "FAIL $f: see $log"
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
