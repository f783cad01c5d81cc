#!/bin/sh
# plot.sh BUILD OUTDIR: what `make bench-plot` runs.  Draws the Lustre and
# GFS2 tables of the last `make bench` (BUILD/bench/*.dat) as PNG files in
# OUTDIR; runs those two sections first if their data is missing.
#   OUTDIR/lustre-threads.png  threads: buffered and O_DIRECT panels
#   OUTDIR/lustre-procs.png    processes: buffered and O_DIRECT panels
#   OUTDIR/gfs2.png            children see and parent sees panels
set -eu

if [ $# -ne 2 ] || [ ! -d "$1" ]; then
	echo "usage: sh tests/bench/plot.sh BUILD OUTDIR" >&2
	exit 2
fi
B=$(cd "$1" && pwd)
OUT=$2
D=$B/bench
command -v gnuplot >/dev/null 2>&1 || { echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
need=
for f in lustre-threads-buffered lustre-threads-direct lustre-procs-buffered lustre-procs-direct; do
	[ -s "$D/$f.dat" ] || need=lustre
done
[ -s "$D/gfs2.dat" ] || need="$need gfs2"
if [ -n "$need" ]; then
	echo "plot.sh: no data from a previous 'make bench' for:$need; running it now"
	# shellcheck disable=SC2086 # $need is a list of section names
	sh "$(dirname "$0")/bench.sh" "$B" $need
fi
mkdir -p "$OUT"
# The O_DIRECT tables are skipped on a file system without O_DIRECT; plot
# an empty panel rather than fail.
for f in lustre-threads-direct lustre-procs-direct; do
	[ -s "$D/$f.dat" ] || printf '# tasks fpt unlocked mutex ofd rangeshim\n1 NaN NaN NaN NaN NaN\n' >"$D/$f.dat"
done

when=$(date -u -r "$D/gfs2.dat" '+%Y-%m-%d')
machine="$(nproc) cores, Linux $(uname -r), $when"

# 800x360 with few colours keeps each file near 40 KB; noenhanced, so that
# "O_DIRECT" is not read as a subscript.
lustre_plot() { # kind title
	cat <<EOF
set terminal pngcairo size 800,360 font "sans,9" noenhanced
set output "$OUT/lustre-$1.png"
set multiplot layout 1,2 title "Lustre seed table, $2: MB/s, each task writes its own region ($machine)"
set logscale x 2
set xlabel "tasks"
set ylabel "MB/s"
set key below font "sans,8"
set grid ytics lc rgb "#dddddd"
set yrange [0:*]
set style data linespoints
set title "buffered (page cache)"
plot "$D/lustre-$1-buffered.dat" u 1:2 t "file-per-task" lc rgb "#777777" dt 2 pt 6, \
     "" u 1:3 t "unlocked" lc rgb "#000000" pt 7, \
     "" u 1:4 t "mutex" lc rgb "#d62728" pt 5, \
     "" u 1:5 t "ofd" lc rgb "#ff7f0e" pt 9, \
     "" u 1:6 t "rangeshim" lc rgb "#1f77b4" lw 2 pt 13
set title "O_DIRECT"
plot "$D/lustre-$1-direct.dat" u 1:2 t "file-per-task" lc rgb "#777777" dt 2 pt 6, \
     "" u 1:3 t "unlocked" lc rgb "#000000" pt 7, \
     "" u 1:4 t "mutex" lc rgb "#d62728" pt 5, \
     "" u 1:5 t "ofd" lc rgb "#ff7f0e" pt 9, \
     "" u 1:6 t "rangeshim" lc rgb "#1f77b4" lw 2 pt 13
unset multiplot
EOF
}

{
	lustre_plot threads threads
	lustre_plot procs processes
	cat <<EOF
set terminal pngcairo size 800,360 font "sans,9" noenhanced
set output "$OUT/gfs2.png"
set multiplot layout 1,2 title "GFS2 seed table: writer processes on one shared file, buffered, MB/s ($machine)"
set logscale x 2
set xlabel "writers"
set ylabel "MB/s"
set key below font "sans,8"
set grid ytics lc rgb "#dddddd"
set yrange [0:*]
set style data linespoints
set title "children see (sum of each writer's rate)"
plot "$D/gfs2.dat" u 1:2 t "unlocked" lc rgb "#000000" pt 7, \
     "" u 1:4 t "ofd" lc rgb "#ff7f0e" pt 9, \
     "" u 1:6 t "rangeshim" lc rgb "#1f77b4" lw 2 pt 13
set title "parent sees (all bytes / wall time)"
plot "$D/gfs2.dat" u 1:3 t "unlocked" lc rgb "#000000" pt 7, \
     "" u 1:5 t "ofd" lc rgb "#ff7f0e" pt 9, \
     "" u 1:7 t "rangeshim" lc rgb "#1f77b4" lw 2 pt 13
unset multiplot
EOF
} | gnuplot
for f in lustre-threads lustre-procs gfs2; do
	echo "bench-plot: $OUT/$f.png ($(wc -c <"$OUT/$f.png") bytes)"
done
