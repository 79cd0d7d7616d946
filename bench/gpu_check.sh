#!/usr/bin/env bash
# bench/gpu_check.sh: check vastprobe's GPU findings on a real NVIDIA GPU, and record that GPU's
# nvidia-smi outputs as new fixtures. Run by hand on a machine with an NVIDIA GPU (no network
# needed), from the repository root, after `python3 -m venv .venv && .venv/bin/pip install -e .`:
#
#     bench/gpu_check.sh                 # all phases, about three minutes
#     GPU_CHECK_SECONDS=20 bench/gpu_check.sh
#
# Phases, each followed by `vastprobe diagnose local` on the load's own process:
#   idle   nothing on the GPU, --expect-gpu           -> expect idle-gpu, no gpu-busy-no-progress
#   busy   a matrix-multiply loop (PyTorch or CuPy)   -> expect neither idle-gpu nor gpu-busy-no-progress
#   spin   a kernel that spins on the GPU while its process sleeps on the CPU, no log growth: what a
#          rank stuck in an NCCL collective looks like -> expect gpu-busy-no-progress
#   nccl   (two GPUs or more) a real NCCL job hung in an all_reduce while rank 1 blocks on a FIFO,
#          the flight recorder on -> expect culprit-rank naming rank 1; its dumps are recorded
# The busy and spin loads need PyTorch (torch.cuda._sleep spins a kernel), CuPy, or nvcc (two small
# kernels compiled here); with none of them only the idle phase runs ("nvidia-smi's own load").
#
# Output: bench/out/gpu-check-<stamp>/ (diagnose JSON, probe captures, a summary), and
# fixtures/nvidia-smi/local-<model>-<driver>/ with the raw nvidia-smi outputs of each phase
# (UUIDs and serials masked) and a NOTE.md saying how and when they were recorded. Review, run
# `.venv/bin/python fixtures/nvidia-smi/expected.py <case>`, and commit them.
# Exit status: 0 every expectation held, 1 one did not, 3 no NVIDIA GPU here.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
SECS=${GPU_CHECK_SECONDS:-30}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${GPU_CHECK_OUT:-$ROOT/bench/out/gpu-check-$STAMP}
QUERY=index,uuid,name,pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,mig.mode.current,clocks_event_reasons.active
APPS=pid,process_name,used_memory,gpu_uuid
FAILED=0
LOAD_PID=

say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
smi() { timeout -s KILL 20 nvidia-smi "$@"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! smi -L >/dev/null 2>&1; then
	echo "gpu_check: no working nvidia-smi here: nothing to check (this is a check for a machine with an NVIDIA GPU)" >&2
	exit 3
fi
mkdir -p "$OUT"
MODEL=$(smi --query-gpu=name --format=csv,noheader | head -n 1 | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader | head -n 1 | tr -cd '0-9.')
CASE=${GPU_CHECK_CASE:-local-$MODEL-$DRIVER}
FIX=${GPU_CHECK_FIXTURES:-$ROOT/fixtures/nvidia-smi}/$CASE
mkdir -p "$FIX"
say "gpu_check $STAMP: $(smi -L | head -n 8 | sed 's/(UUID: [^)]*)//' | tr '\n' ';') driver $DRIVER, kernel $(uname -r)"

# UUIDs and serials identify a machine; the shape of the output is what the fixtures are for.
mask() { sed -E 's/GPU-[0-9a-f]{8}-[0-9a-f-]{27}/GPU-00000000-0000-0000-0000-000000000000/g; s/MIG-[0-9a-f]{8}-[0-9a-f-]{27}/MIG-00000000-0000-0000-0000-000000000000/g'; }

record() { # STATE: the probe's own two queries (with a header, no units) and the full default table
	smi --query-gpu="$QUERY" --format=csv,nounits 2>&1 | mask >"$FIX/query-gpu.$1.csv"
	smi --query-compute-apps="$APPS" --format=csv,nounits 2>&1 | mask >"$FIX/compute-apps.$1.csv"
	smi 2>&1 | mask >"$OUT/nvidia-smi.$1.txt"
}

diagnose() { # STATE PID [extra args]: diagnose the load's process, keep the JSON and a raw capture
	local state=$1 pid=$2
	shift 2
	"$PY" -m vastprobe diagnose local --sample 2 --format json --pid "$pid" "$@" >"$OUT/diagnose.$state.json" 2>"$OUT/diagnose.$state.err"
	"$PY" -m vastprobe collect local --sample 2 -o "$OUT/capture.$state.json" >/dev/null 2>&1
	"$PY" - "$OUT/diagnose.$state.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
host = json.load(open(sys.argv[1]))["hosts"][0]
for f in host["findings"]:
    print(f"  {f['code']} {f['rule']:<22} {f['severity']:<8} {f['summary']}")
print("  verdict:", host["verdict"])
EOF
}

has_rule() { "$PY" -c 'import json,sys; h=json.load(open(sys.argv[1]))["hosts"][0]; sys.exit(0 if any(f["rule"]==sys.argv[2] for f in h["findings"]) else 1)' "$OUT/diagnose.$1.json" "$2"; }

expect() { # STATE RULE yes|no
	if has_rule "$1" "$2"; then got=yes; else got=no; fi
	if [ "$got" = "$3" ]; then say "  ok: $2 ${3/no/absent}"; else
		say "  FAIL: $2 expected ${3/no/absent}, got ${got/no/absent}"
		FAILED=1
	fi
}

stop_load() {
	if [ -n "$LOAD_PID" ]; then kill "$LOAD_PID" 2>/dev/null; wait "$LOAD_PID" 2>/dev/null; LOAD_PID=; fi
}
trap stop_load EXIT

# A load generator in this order: PyTorch, CuPy, nvcc. MODE busy = matmul loop; spin = a GPU kernel
# that spins while the process sleeps on the CPU (no sync, no log).
start_load() { # MODE
	if "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
		"$PY" - "$1" <<'EOF' &
import sys, threading, torch
if sys.argv[1] == "busy":
    a = torch.randn(8192, 8192, device="cuda")
    while True:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
else:
    while True:
        torch.cuda._sleep(50_000_000_000)  # spins on the GPU; the host does not wait for it
        threading.Event().wait(60)
EOF
		LOAD_PID=$!
		return 0
	fi
	if "$PY" -c 'import cupy; cupy.cuda.runtime.getDeviceCount()' 2>/dev/null; then
		"$PY" - "$1" <<'EOF' &
import sys, threading, cupy
spin = cupy.RawKernel(r'''extern "C" __global__ void spin(long long n) {
    long long t = clock64(); while (clock64() - t < n) {} }''', "spin")
if sys.argv[1] == "busy":
    a = cupy.random.rand(8192, 8192, dtype=cupy.float32)
    while True:
        a = cupy.clip(a @ a, -1, 1); cupy.cuda.Device().synchronize()
else:
    while True:
        spin((1,), (1,), (cupy.int64(50_000_000_000),)); threading.Event().wait(60)
EOF
		LOAD_PID=$!
		return 0
	fi
	if command -v nvcc >/dev/null 2>&1; then
		cat >"$OUT/load.cu" <<'EOF'
#include <string.h>
#include <unistd.h>
__global__ void spin(long long n) { long long t = clock64(); while (clock64() - t < n) {} }
__global__ void work(float *x, int n) {
    float a = threadIdx.x, b = blockIdx.x;
    for (int i = 0; i < n; i++) a = fmaf(a, 0.999f, b);
    x[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "busy") == 0) {
        float *x; cudaMalloc(&x, 4096 * 256 * sizeof(float));
        for (;;) { work<<<4096, 256>>>(x, 1 << 20); cudaDeviceSynchronize(); }
    }
    for (;;) { spin<<<1, 1>>>(50000000000LL); sleep(60); }
}
EOF
		[ -x "$OUT/load" ] || nvcc -o "$OUT/load" "$OUT/load.cu" >/dev/null 2>&1 || return 1
		"$OUT/load" "$1" &
		LOAD_PID=$!
		return 0
	fi
	return 1
}

# ---- idle
IDLE_PID=$(sh -c 'sleep 600 >/dev/null 2>&1 & echo $!')
sleep 2
record idle
say "idle: nothing on the GPU, --expect-gpu (pid $IDLE_PID)"
diagnose idle "$IDLE_PID" --expect-gpu
expect idle idle-gpu yes
expect idle gpu-busy-no-progress no
kill "$IDLE_PID" 2>/dev/null

# ---- busy
if start_load busy; then
	sleep "$((SECS / 3 + 5))"
	record load
	say "busy: matrix multiply, pid $LOAD_PID"
	diagnose load "$LOAD_PID" --expect-gpu
	expect load idle-gpu no
	expect load gpu-busy-no-progress no
	stop_load
else
	say "busy: no PyTorch, CuPy or nvcc here: skipped (only nvidia-smi's own readings were recorded)"
fi

# ---- spin: a hung collective's signature
if start_load spin; then
	touch "$OUT/job.log"
	sleep "$((SECS / 3 + 5))"
	record spin
	say "spin: a kernel spinning while its process sleeps, pid $LOAD_PID"
	diagnose spin "$LOAD_PID" --log "$OUT/job.log"
	expect spin gpu-busy-no-progress yes
	stop_load
else
	say "spin: no PyTorch, CuPy or nvcc here: skipped"
fi

# ---- nccl: a hung NCCL collective across the GPUs, one rank held elsewhere, the flight recorder on
# (needs PyTorch with CUDA and at least two GPUs): every rank but 1 enters an all_reduce, rank 1
# blocks on a FIFO; each rank dumps its flight recorder (torch._C._distributed_c10d._dump_nccl_trace)
# to $OUT/nccl_trace_rank_<rank>, recorded as fixtures/flight-recorder/<case>-nccl/ for the reader.
NGPU=$(smi -L | grep -c '^GPU ')
if [ "$NGPU" -ge 2 ] && "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	mkfifo "$OUT/loader.fifo" 2>/dev/null
	cat >"$OUT/nccl_job.py" <<'PYEOF'
import os, threading, time
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
def dump_later():
    time.sleep(20)
    from torch._C._distributed_c10d import _dump_nccl_trace
    with open(os.environ["FR_OUT"] + str(rank), "wb") as f:
        f.write(_dump_nccl_trace())
threading.Thread(target=dump_later, daemon=True).start()
t = torch.ones(1 << 20, device="cuda")
for _ in range(3):
    dist.all_reduce(t)
torch.cuda.synchronize()
if rank == 1:
    open(os.environ["FIFO"]).read()
dist.all_reduce(t)
torch.cuda.synchronize()
PYEOF
	NP=$((NGPU < 4 ? NGPU : 4))
	FIFO="$OUT/loader.fifo" FR_OUT="$OUT/nccl_trace_rank_" TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_BUFFER_SIZE=2000 \
		TORCH_FR_DUMP_TEMP_FILE="$OUT/fr_auto_rank_" \
		"$PY" -m torch.distributed.run --nproc-per-node "$NP" --master-port 29561 "$OUT/nccl_job.py" \
		>"$OUT/nccl_job.log" 2>&1 &
	NCCL_PID=$!
	sleep 40
	say "nccl: $NP ranks on $NP GPUs, rank 1 on a FIFO, the others in an all_reduce (launcher $NCCL_PID)"
	"$PY" -m vastprobe diagnose local --format json --snapshot --match nccl_job.py >"$OUT/diagnose-nccl.json" 2>>"$OUT/summary.txt"
	"$PY" -m vastprobe collect local -o "$OUT/capture-nccl.json" --match nccl_job.py 2>>"$OUT/summary.txt"
	if "$PY" - "$OUT/diagnose-nccl.json" <<'PYEOF'; then
import json, sys
h = json.load(open(sys.argv[1]))["hosts"][0]
f = [f for f in h["findings"] if f["rule"] == "culprit-rank"]
ok = bool(f) and f[0]["summary"].startswith("rank 1 ")
print("nccl: culprit-rank", "names rank 1" if ok else f"MISSED: {[(x['rule'], x['summary']) for x in h['findings']]}")
sys.exit(0 if ok else 1)
PYEOF
		say "nccl: culprit named"
	else
		say "nccl: EXPECTATION FAILED: culprit-rank should name rank 1"
		FAILED=1
	fi
	mkdir -p "$ROOT/fixtures/flight-recorder/$CASE-nccl"
	cp "$OUT"/nccl_trace_rank_* "$ROOT/fixtures/flight-recorder/$CASE-nccl/" 2>/dev/null
	pkill -P "$NCCL_PID" 2>/dev/null
	kill "$NCCL_PID" 2>/dev/null
else
	say "nccl: needs PyTorch with CUDA and two GPUs: skipped"
fi

cat >"$FIX/NOTE.md" <<EOF
# $CASE

Recorded here by \`bench/gpu_check.sh\` on $STAMP: $(smi -L | head -n 1 | sed 's/(UUID: [^)]*)//'), driver $DRIVER,
kernel $(uname -r). \`query-gpu.<state>.csv\` and \`compute-apps.<state>.csv\` are the probe's own
queries (\`--format=csv,nounits\` with a header), run while the GPU was idle, under a matrix-multiply
load (\`load\`) and under a spinning kernel whose process slept (\`spin\`), as far as this machine had
a load generator (see bench/out/gpu-check-$STAMP/summary.txt). GPU and MIG UUIDs masked.
EOF
say "fixtures written to $FIX; summary in $OUT/summary.txt"
exit "$FAILED"
