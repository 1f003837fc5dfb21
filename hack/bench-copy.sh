#!/usr/bin/env bash
# Benchmarks nodewright-copy against plain dd and the manual runbook
# (dd + sha256sum of source and target) on a dense random file and a sparse
# file with 10 % data, and checks the targets of issue 3. Run from anywhere;
# works on a fresh machine with Go installed. Needs root to drop the page
# cache between commands; without it the figures favour cached reads.
#
#   BENCH_SIZE_MIB=256 hack/bench-copy.sh   # quick run (default 4096)
set -euo pipefail

cd "$(dirname "$0")/.."
size_mib=${BENCH_SIZE_MIB:-4096}
bench=.bench
if ! [[ $size_mib =~ ^[0-9]+$ ]] || ((size_mib < 10)); then
	echo "BENCH_SIZE_MIB must be a whole number of at least 10, got '$size_mib'" >&2
	exit 2
fi
mkdir -p "$bench/helper" bin

echo "building bin/nodewright-copy and the measuring helper" >&2
CGO_ENABLED=0 go build -o bin/nodewright-copy ./cmd/nodewright-copy

# The helper fills test files quickly and measures wall time and peak RSS
# through wait4's rusage, which covers a command's whole process tree, so
# nothing beyond Go is needed (no GNU time). It is its own module so it
# stays out of the repository's build.
cat >"$bench/helper/go.mod" <<'EOF'
module benchhelper

go 1.24
EOF
cat >"$bench/helper/main.go" <<'EOF'
package main

import (
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

const mib = 1 << 20

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-helper:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 3 && args[0] == "dense":
		return fill(args[1], args[2], 1)
	case len(args) == 3 && args[0] == "sparse":
		return fill(args[1], args[2], 10)
	case len(args) >= 3 && args[0] == "measure":
		return measure(args[1], args[2:])
	}
	return fmt.Errorf("usage: dense FILE MIB | sparse FILE MIB | measure STATSFILE COMMAND...")
}

// fill writes random data into 1 MiB of every `every` MiB of a file of the
// given size and leaves the rest a hole.
func fill(path, sizeArg string, every int64) error {
	sizeMiB, err := strconv.ParseInt(sizeArg, 10, 64)
	if err != nil {
		return err
	}
	var seed [32]byte
	crand.Read(seed[:])
	random := rand.NewChaCha8(seed)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(sizeMiB * mib); err != nil {
		return err
	}
	buf := make([]byte, mib)
	for off := int64(0); off < sizeMiB; off += every {
		random.Read(buf)
		if _, err := f.WriteAt(buf, off*mib); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// measure runs a command and writes "wall_seconds peak_rss_kib exit_code".
func measure(statsPath string, command []string) error {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start)
	if cmd.ProcessState == nil {
		return runErr
	}
	usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	stats := fmt.Sprintf("%.3f %d %d\n", wall.Seconds(), usage.Maxrss, cmd.ProcessState.ExitCode())
	return os.WriteFile(statsPath, []byte(stats), 0o644)
}
EOF
(cd "$bench/helper" && GOWORK=off CGO_ENABLED=0 go build -o ../bench-helper .)
helper=$bench/bench-helper

prepare() { # kind
	local file=$bench/$1-${size_mib}MiB.img
	if [[ ! -f $file || $(stat -c %s "$file") -ne $((size_mib << 20)) ]]; then
		echo "creating $file" >&2
		"$helper" "$1" "$file" "$size_mib"
	fi
	echo "$file"
}

dropped=yes
drop_caches() {
	sync
	if [[ -w /proc/sys/vm/drop_caches ]]; then
		echo 3 >/proc/sys/vm/drop_caches
	else
		dropped=no
	fi
}

declare -A wall rss
target=$bench/target.img
measure() { # key command...
	local key=$1 code
	shift
	rm -f "$target"
	drop_caches
	"$helper" measure "$bench/stats" "$@"
	read -r wall[$key] rss[$key] code <"$bench/stats"
	rm -f "$target"
	if ((code != 0)); then
		echo "$key: command failed with exit code $code: $*" >&2
		exit 1
	fi
}

runbook() { # source target: the manual procedure the tool replaces
	dd if="$1" of="$2" bs=4M conv=fsync status=none
	local source_sum target_sum
	source_sum=$(sha256sum <"$1")
	target_sum=$(sha256sum <"$2")
	[[ $source_sum == "$target_sum" ]]
}
export -f runbook

for kind in dense sparse; do
	src=$(prepare "$kind")
	echo "measuring $kind: dd, runbook, nodewright-copy" >&2
	measure "$kind.dd" dd if="$src" of="$target" bs=4M conv=fsync status=none
	measure "$kind.runbook" bash -c 'runbook "$1" "$2"' _ "$src" "$target"
	measure "$kind.ncp" bin/nodewright-copy copy --src "$src" --dst "$target" --json --termination-log "" >"$bench/$kind.json"
done

calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }
field() { sed -n "s/.*\"$2\":\([a-z0-9]*\).*/\1/p" "$bench/$1.json"; }

echo
echo "nodewright-copy benchmark: $size_mib MiB per file, $(nproc) CPUs, page cache dropped before each command: $dropped"
printf '%-7s %-16s %9s  %-34s %12s\n' file command "wall (s)" "ratio (same run)" "peak RSS"
for kind in dense sparse; do
	dd_s=${wall[$kind.dd]} rb_s=${wall[$kind.runbook]} ncp_s=${wall[$kind.ncp]}
	printf '%-7s %-16s %9s  %-34s %8s MiB\n' "$kind" "dd bs=4M" "$dd_s" "1.00 (baseline)" "$(calc "${rss[$kind.dd]} / 1024")"
	printf '%-7s %-16s %9s  %-34s %8s MiB\n' "$kind" "runbook" "$rb_s" "$(calc "$rb_s / $dd_s") x dd" "$(calc "${rss[$kind.runbook]} / 1024")"
	printf '%-7s %-16s %9s  %-34s %8s MiB\n' "$kind" "nodewright-copy" "$ncp_s" \
		"$(calc "$ncp_s / $dd_s") x dd, $(calc "$ncp_s / $rb_s") x runbook" "$(calc "${rss[$kind.ncp]} / 1024")"
	echo "        nodewright-copy: written $(field "$kind" bytesWritten) B, skipped $(field "$kind" bytesSkipped) B, directIO $(field "$kind" directIO)"
done

failed=0
check() { # condition description
	if awk "BEGIN { exit !($1) }"; then
		echo "PASS $2"
	else
		echo "FAIL $2"
		failed=1
	fi
}
echo
check "${wall[dense.ncp]} <= 1.3 * ${wall[dense.dd]}" \
	"dense copy+verify ${wall[dense.ncp]} s <= 1.3 x dd ($(calc "1.3 * ${wall[dense.dd]}") s): $(calc "${wall[dense.ncp]} / ${wall[dense.dd]}") x"
check "${wall[dense.ncp]} <= 0.5 * ${wall[dense.runbook]}" \
	"dense copy+verify ${wall[dense.ncp]} s <= 0.5 x runbook ($(calc "0.5 * ${wall[dense.runbook]}") s): $(calc "${wall[dense.ncp]} / ${wall[dense.runbook]}") x"
check "${wall[sparse.runbook]} >= 5 * ${wall[sparse.ncp]}" \
	"sparse copy+verify $(calc "${wall[sparse.runbook]} / ${wall[sparse.ncp]}") x faster than the runbook (want >= 5)"
max_rss=$((rss[dense.ncp] > rss[sparse.ncp] ? rss[dense.ncp] : rss[sparse.ncp]))
check "$max_rss <= 64 * 1024" "nodewright-copy peak RSS $(calc "$max_rss / 1024") MiB <= 64 MiB"
exit "$failed"
