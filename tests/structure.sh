#!/bin/sh
# The library's structure, checked (docs/design.md, "The map"):
#  - layers: a file in shim/<layer>/ includes headers of its own layer or
#    of the layers below it (core < node < cluster < preload < cli), so the
#    folder graph has no cycle; the Makefile's per-layer -I paths make the
#    library's objects fail to compile otherwise, and this covers headers
#    and the command too; and no include loop between modules (x.c with
#    x.h) inside a layer either;
#  - no function in the library longer than RS_MAX_FN_LINES (100) lines,
#    counted from the line that names it to its closing brace;
#  - no issue or tracker numbers in shim/ (comments say why, now);
#  - internal system calls never go through an exported wrapper: no
#    syscall() call in shim/ but in the raw-call helper (core/rawsyscall.h,
#    whose fallback is libc's own where syscall() is not wrapped), and,
#    given BUILD_DIR, no library object that calls a symbol the library
#    exports, but for the public range-lock API (include/rangeshim/), nor
#    a function of a higher layer.
# Prints every violation and exits 1 if there is one.
#
#   sh tests/structure.sh [SRC_DIR [BUILD_DIR]]
set -u
cd "${1:-.}" || exit 2
BUILD_DIR=${2:-}
MAX=${RS_MAX_FN_LINES:-100}
layers="core node cluster preload cli"
rank() { n=0; for l in $layers; do [ "$l" = "$1" ] && { echo $n; return; }; n=$((n + 1)); done; echo 99; }
bad=0

# header name -> layer of the folder that holds it
map=$(for l in $layers; do for h in shim/$l/*.h; do [ -e "$h" ] && echo "${h##*/} $l"; done; done)
for l in $layers; do
	r=$(rank "$l")
	for f in shim/$l/*.c shim/$l/*.h; do
		[ -e "$f" ] || continue
		for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
			case $h in rangeshim/*) continue ;; esac
			hl=$(echo "$map" | awk -v h="${h##*/}" '$1 == h { print $2; exit }')
			if [ -z "$hl" ]; then
				echo "structure: $f includes \"$h\", which is in no layer of shim/"
				bad=1
			elif [ "$(rank "$hl")" -gt "$r" ]; then
				echo "structure: $f (layer $l) includes $h of the higher layer $hl"
				bad=1
			fi
		done
	done
done
for f in shim/*.c shim/*.h; do
	[ -e "$f" ] && { echo "structure: $f is in no layer (shim/<layer>/)"; bad=1; }
done

# Files too: x.c and x.h are one module, and no module includes, through
# others, itself (tsort names a loop).  Every module names itself, so an
# empty list means the listing failed, not that there is no loop.
pairs=$(for l in $layers; do
	[ "$l" = cli ] && continue
	for f in shim/$l/*.c shim/$l/*.h; do
		[ -e "$f" ] || continue
		m=${f##*/}; m=${m%.*}
		echo "$m $m"
		sed -n 's/^#include "\([^"/]*\)\.h".*/\1/p' "$f" | sed "s/^/$m /"
	done
done | awk -v hs="$(echo "$map" | awk '{ sub(/\.h$/, "", $1); print $1 }')" '
	BEGIN { n = split(hs, h, "\n"); for (i = 1; i <= n; i++) ours[h[i]] = 1 }
	($2 in ours) && ($1 == $2 || !seen[$0]++)') && [ -n "$pairs" ] ||
	{ echo "structure: the include-loop check could not list the modules' includes"; bad=1; }
loop=$(echo "$pairs" | tsort 2>&1 >/dev/null)
[ -n "$loop" ] && { echo "$loop" | sed 's/^/structure: include loop: /'; bad=1; }

long=$(for f in shim/*/*.c shim/*/*.h; do
	awk -v f="$f" -v max="$MAX" '
		/^[A-Za-z_]/ && !/;[ \t]*$/ && !/^(typedef|struct|enum|union)[ \t]/ && !start { start = NR; sig = "" }
		start && !body { sig = sig " " $0 }
		/^\{/ { if (start) body = 1 }
		/^\}/ { if (body && NR - start + 1 > max) {
				gsub(/__attribute__\(\([^)]*\)\)/, "", sig); sub(/\(.*/, "", sig)
				n = split(sig, w, /[ \t*]+/)
				printf "structure: %s:%d: %s is %d lines (at most %d)\n", f, start, w[n], NR - start + 1, max }
			start = 0; body = 0 }
		/^[ \t]*$/ && !body { start = 0 }' "$f"
done)
[ -n "$long" ] && { echo "$long"; bad=1; }

issues=$(grep -rnE '\b[Ii]ssues? #?[0-9]+' shim || true)
[ -n "$issues" ] && { echo "$issues" | sed 's/^/structure: tracker number in code: /'; bad=1; }

calls=$(grep -rnE '(^|[^_[:alnum:]])syscall\(' shim --include='*.c' --include='*.h' |
	grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)' |
	grep -vE '^shim/core/rawsyscall\.h:|^shim/preload/interpose\.c:[0-9]+:RS_EXPORT long syscall\(' || true)
[ -n "$calls" ] && { echo "$calls" | sed 's/^/structure: syscall() outside the raw-call helper: /'; bad=1; }

wrapped=""
if [ -n "$BUILD_DIR" ]; then
	lib=$BUILD_DIR/librangeshim.so
	if [ ! -e "$lib" ]; then
		echo "structure: $lib is not built"; bad=1
	else
		exports=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWi]$/ { sub(/@.*/, "", $3); print $3 }' |
			grep -v '^rs_rangelock_')
		# One nm pass per object for both rules below: a call of an
		# exported symbol (a wrapper), and a call into a higher layer
		# (a lower layer learns of a higher one by a hook).
		calls=$(for o in "$BUILD_DIR"/obj/*/*.o; do
			l=${o%/*}; l=${l##*/}
			nm --defined-only "$o" | awk -v l="$l" '$2 ~ /^[TDBR]$/ { print "D", $3, l }'
			nm -u "$o" | awk -v l="$l" -v o="$o" '{ print "U", $2, l, o }'
		done | awk -v order="$layers" -v wrappers="$exports" '
			BEGIN { n = split(order, w, " "); for (i = 1; i <= n; i++) rank[w[i]] = i
				n = split(wrappers, e, "\n"); for (i = 1; i <= n; i++) wrapper[e[i]] = 1 }
			$1 == "D" { def[$2] = $3; next }
			{ use[++k] = $0 }
			END { for (i = 1; i <= k; i++) { split(use[i], u, " ")
				if (u[2] in wrapper)
					printf "structure: %s calls %s, which the library exports (a wrapper): use rs_sys or rs_real\n", u[4], u[2]
				else if ((u[2] in def) && rank[def[u[2]]] > rank[u[3]])
					printf "structure: %s (layer %s) calls %s of the higher layer %s\n", u[4], u[3], u[2], def[u[2]] }
				print "end" }')
		# A failed awk must not read as a clean result.
		case $calls in
		end) ;;
		*end) echo "$calls" | sed '$d'; bad=1 ;;
		*) echo "structure: the objects' calls could not be checked: $calls"; bad=1 ;;
		esac
		wrapped="; no internal call through an exported wrapper or into a higher layer"
	fi
fi

[ $bad = 0 ] && echo "structure: layers core < node < cluster < preload < cli hold; no function over $MAX lines; no tracker numbers in shim/; no syscall() outside the raw-call helper$wrapped"
exit $bad
