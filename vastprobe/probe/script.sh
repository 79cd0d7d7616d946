# vastprobe probe: one read-only pass over /proc, the kernel log, cgroups, GPUs and logs.
# POSIX sh (dash, bash, BusyBox ash). It writes no file, sends no signal to anything but its
# own watchdog and process group, and forks a fixed number of commands however many
# processes the target runs: each /proc source is read for every PID by one command.
# Output is framed: "\n@@<boundary>@@ <name>\n" ... "\n@@rc=<status>\n" "\n@@<boundary>@@ /<name>\n".
# A section that lacks its rc line was cut by its size cap (or by the deadline).
# The boundary never appears in any command's argv (other users can read those in /proc): only
# builtins print it, and the awks that need it get it in their environment (VP_B=... awk), which
# only the probe's own user can read. Content a user controls (file names, link targets, kernel
# log lines) is escaped or prefixed where it is produced, so it never starts a line of its own.
# Forks cost about a millisecond each on small VMs, so every section is bounded by the command
# that makes it (grep patterns, awk limits, tail -c, head -n) rather than by a `head -c` of its own.
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export PATH

# ---- parameters, rendered by vastprobe (every value single-quoted) ----
#@PARAMS@
# ---- end of parameters ----

vp_has() { command -v "$1" >/dev/null 2>&1; }

# secn NAME CMD...: a section whose output its command bounds; runs in this shell, no fork.
# The command's status is left in vp_rc.
secn() {
	vp_n=$1
	shift
	printf '\n@@%s@@ %s\n' "$VP_B" "$vp_n"
	"$@" 2>&1
	vp_rc=$?
	printf '\n@@rc=%s\n\n@@%s@@ /%s\n' "$vp_rc" "$VP_B" "$vp_n"
}

# Which timeout syntax works, found without a fork where we can: a timeout that is a regular
# file is coreutils'; a symlink may be BusyBox, whose releases before 1.30 want -t SECONDS.
vp_tmo_detect() {
	VP_TMO=none
	vp_ifs=$IFS
	IFS=:
	set -f
	for vp_d in $PATH; do
		[ -x "$vp_d/timeout" ] || continue
		if [ ! -h "$vp_d/timeout" ]; then
			VP_TMO=new
		elif timeout 1 true >/dev/null 2>&1; then
			VP_TMO=new
		elif timeout -t 1 true >/dev/null 2>&1; then
			VP_TMO=old
		fi
		break
	done
	set +f
	IFS=$vp_ifs
}
vp_tmo_detect

VP_NL='
'
# ls -b (GNU) escapes names; BusyBox's ls is a link to busybox and has no -b. ss gives Unix
# sockets' peers. util-linux's dmesg (a file, not BusyBox's link) takes -k: the kernel's own lines
# alone, not those a process wrote to /dev/kmsg (the kernel files them under `user`: a root tenant's
# forged OOM kill named an innocent process killed; found by a helper). All found without a fork.
vp_tools_detect() {
	VP_LSB=
	VP_SS=0
	VP_DMESGK=
	vp_ifs=$IFS
	IFS=:
	set -f
	for vp_d in $PATH; do
		if [ -z "$VP_LSB" ] && [ -x "$vp_d/ls" ]; then
			if [ -h "$vp_d/ls" ]; then VP_LSB=-; else VP_LSB=b; fi
		fi
		if [ "$VP_SS" = 0 ] && [ -x "$vp_d/ss" ]; then VP_SS=1; fi
		if [ -z "$VP_DMESGK" ] && [ -x "$vp_d/dmesg" ]; then
			if [ -h "$vp_d/dmesg" ]; then VP_DMESGK=-; else VP_DMESGK=-k; fi
		fi
	done
	[ "$VP_DMESGK" = -k ] || VP_DMESGK=
	set +f
	IFS=$vp_ifs
	[ "$VP_LSB" = b ] || VP_LSB=
}
vp_tools_detect
# tmo SECONDS CMD...: run CMD, killed after SECONDS when a timeout command exists.
tmo() {
	vp_t=$1
	shift
	case $VP_TMO in
	new) timeout -s KILL "$vp_t" "$@" ;;
	old) timeout -s KILL -t "$vp_t" "$@" ;;
	*) "$@" ;;
	esac
}

vp_rc_of() {
	"$@"
	printf '\n@@rc=%s\n' "$?"
}

# sec NAME MAXBYTES CMD...: one framed section, stderr folded in, capped at MAXBYTES, bounded as a
# whole: CMD runs in a child nobody waits for, and the head that copies it ends at EOF or at its
# timeout, so neither a CMD stuck in D state (nvidia-smi on a lost GPU, which no signal ends) nor a
# grandchild that keeps its stdout open holds the probe longer than VP_NVSMI_T + 2 seconds.
sec() {
	vp_n=$1
	vp_max=$2
	shift 2
	printf '\n@@%s@@ %s\n' "$VP_B" "$vp_n"
	{ vp_reaped vp_alone vp_rc_of "$@"; } | vp_bounded $((VP_NVSMI_T + 2)) head -c "$vp_max"
	printf '\n@@%s@@ /%s\n' "$VP_B" "$vp_n"
}

# vp_reaped CMD... | vp_bounded SECONDS READER...: CMD in a child of the pipeline's left side, which
# waits for it (and so reaps it), while READER copies its output under a timeout. The left side
# sends its own PID first; past the timeout the right side kills it (a CMD in D state, which no
# signal ends, is then left to the init, as before). A child nobody waited for was reparented to
# the target's init at once: an init that reaps nothing (a `python main.py` entrypoint) kept 3
# zombies of every probe, thousands in an hour of `watch -n 1`.
vp_reaped() {
	read -r vp_self vp_x </proc/self/stat 2>/dev/null
	printf '%s\n' "${vp_self:-0}"
	"$@" &
	wait $!
}
vp_bounded() {
	vp_t=$1
	shift
	read -r vp_left
	tmo "$vp_t" "$@"
	vp_rc=$?
	case $vp_rc in
	124 | 137)
		# only while it is still this probe's own subshell (its parent is the probe's shell): a PID
		# that ended and was reused meanwhile is somebody else's
		vp_l=
		read -r vp_l </proc/"${vp_left:-0}"/stat 2>/dev/null
		set -- ${vp_l##*') '}
		[ "${2:-}" = "$$" ] && kill -KILL "$vp_left" 2>/dev/null
		;;
	esac
	return "$vp_rc"
}

# Builtins only; no file is read a byte per read(2) more than it must be. selfpid is our PID as
# /proc names it (cd -P resolves the /proc/self link): equal to $$ when /proc is our PID
# namespace's. The client takes the uid from this shell's status in s0.proc, and derives CLK_TCK
# from its start time against the uptime (getconf would cost two forks).
vp_meta() {
	vp_os=
	vp_host=
	vp_self=
	read -r vp_os </proc/sys/kernel/osrelease 2>/dev/null
	read -r vp_host </proc/sys/kernel/hostname 2>/dev/null
	vp_cwd=$PWD
	if cd -P /proc/self 2>/dev/null; then vp_self=${PWD#/proc/}; fi
	cd "$vp_cwd" 2>/dev/null || cd /
	printf 'version=%s\n' "$VP_VERSION"
	printf 'shell_pid=%s\nshell_ppid=%s\nselfpid=%s\n' "$$" "$PPID" "$vp_self"
	printf 'kernel=%s\nhostname=%s\ntimeout=%s\n' "$vp_os" "$vp_host" "$VP_TMO"
	vp_arch=
	read -r vp_arch </proc/sys/kernel/arch 2>/dev/null
	printf 'format=5\narch=%s\nls=%s\nss=%s\n' "$vp_arch" "$VP_LSB" "$VP_SS"
}

# One grep: every line of the small files (they start with a digit, a capital or some/full),
# and of /proc/stat (lines start lower-case) only btime.
vp_host() {
	grep -H -E '^(btime |[0-9A-Z]|some |full )' /proc/uptime /proc/loadavg /proc/meminfo \
		/proc/sys/kernel/pid_max /proc/sys/kernel/dmesg_restrict /proc/stat \
		/proc/pressure/cpu /proc/pressure/memory /proc/pressure/io
}

vp_now() {
	vp_up=
	read -r vp_up vp_idle </proc/uptime 2>/dev/null
	printf 'uptime=%s\n' "$vp_up"
}

# One grep per sample reads every per-process file it needs for all PIDs at once; the pattern
# keeps stat records (and the tail of one whose comm holds a newline), the status fields stat lacks,
# io counters, the wchan symbol and the memory/v2 lines of cgroup.
VP_STATUS_KEYS='TracerPid|Uid|VmRSS|VmHWM|NSpid|SigIgn|SigCgt|voluntary_ctxt_switches|nonvoluntary_ctxt_switches'
VP_PROC_PAT="^([0-9]+ \\(|-?[0-9]+ 0x|0::|se\\.exec_start |[0-9]+:([^:]*,)?memory(,[^:]*)?:|[A-Za-z_][A-Za-z_0-9.]*\$|0\$|(rchar|wchar|read_bytes|write_bytes|$VP_STATUS_KEYS):)|\\) [A-Za-z] -?[0-9]"

# vp_many LIST CMD...: CMD with the words of LIST as arguments, in one exec. When the list is too
# long for exec (status 126: tens of thousands of processes, or a small stack limit), xargs cuts
# it into runs that fit; a CMD that starts with `tmo SECONDS` keeps its timeout around xargs.
vp_many() {
	vp_ml=$1
	shift
	"$@" $vp_ml
	vp_rc=$?
	[ "$vp_rc" != 126 ] && return "$vp_rc"
	if [ "$1" = tmo ]; then
		vp_mt=$2
		shift 2
		printf '%s\n' $vp_ml | tmo "$vp_mt" xargs "$@"
	else
		printf '%s\n' $vp_ml | xargs "$@"
	fi
}

# vp_proc_grep LIST: one grep over the /proc files in LIST.
vp_proc_grep() { vp_many "$1" grep -H -E "$VP_PROC_PAT"; }

# Awk: a program as its parent and its name, from a stat record LINE (grep -H's) whose fields after
# the last ") " are TAIL (comm may hold ") " itself): the copies of one pool, the ranks of one
# launcher, share it.
VP_KIND_AWK='function prog_kind(line, tail, ppid, lp) {
	lp = index(line, "(")
	return ppid " " substr(line, lp + 1, length(line) - length(tail) - lp - 2)
}
'

# Prints the lists of the files the next passes read of each process whose stat record says it is
# not a kernel thread (PF_KTHREAD, 0x200000, in the flags field, the 7th after the last ") ": comm
# may hold ") " itself): one line per kind of file (status, io, wchan, cgroup, cmdline, fd), each
# printed in one pass at the end. The shell neither loops over processes nor forks a printf for
# each list, and no list grows by an append per process (a copy of all of it each time).
VP_USER_AWK='/^\/proc\/[0-9]+\/stat:/ {
	s = $0
	while ((i = index(s, ") ")) > 0) s = substr(s, i + 2)
	if (s == $0 || split(s, f, " ") < 7) next
	if (int(f[7] / 2097152) % 2) next
	p = substr($0, 1, index(substr($0, 7), "/") + 5)
	up[nu++] = p
	q = substr(p, 7)
	# the processes of the job: --pid and those under it (a child comes after its parent in /proc but
	# where PIDs wrapped)
	if (nj && (q in job || f[2] in job)) job[q] = 1
	if (f[1] == "Z" && nz++ < 64) print "z" p
	# multi-threaded: the newest 192 of the job, then the newest others (a busy host runs more than
	# the bound, and its daemons and other tenants must not push the threads of the job out), each
	# with its count of threads
	# a program by its parent and its name: a rank whose other threads ended (its peers closed) is
	# single-threaded beside ranks that are not, and was said to be gone
	kin = prog_kind($0, s, f[2])
	if (f[18] > 1) {
		mk[kin] = 1
		if (nj && q in job) { mjn[nmj % 192] = f[18]; mj[nmj++ % 192] = p }
		else { mtn[nt % 192] = f[18]; mt[nt++ % 192] = p }
	}
	# single-threaded processes asleep on a terminal (the newest 32): their environ says which tmux
	# pane or screen window the terminal is (TMUX_PANE, STY), for a prompt nobody answers
	else if (f[5] != 0 && f[1] == "S") tt[ntt++ % 32] = "e" p
	# other single-threaded ones: their environ when a multi-threaded sibling runs the same program
	else if (f[1] != "Z") { sk[ns % 256] = kin; sp[ns++ % 256] = "e" p }
	# with --py-spy: Python programs (by their comm) that are neither in D state nor zombies, nor
	# the parent of the probe (a local run: vastprobe itself); with --pid, those of the job, else
	# the newest
	if (py != 1) next
	lp = index($0, "(")
	if (f[1] == "D" || f[1] == "Z" || q == me || substr($0, lp + 1, 6) != "python") next
	if (nj && q in job) { if (nun < 8) un[nun++] = "y" p }
	else pyl[npy++ % 8] = "y" p
}
BEGIN { nj = split(jobs, w, " "); for (i = 1; i <= nj; i++) job[w[i]] = 1 }
# 192 multi-threaded processes, those of the job first, each part newest first (a job starts after the
# daemons), each with its share of the thread bound; with --py-spy, 8 Python programs
END {
	# a list of no process is one empty name, as printf with no argument made it
	if (nu == 0) up[nu++] = ""
	nk = split("status io wchan cgroup cmdline fd", kind, " ")
	for (k = 1; k <= nk; k++) {
		printf "%s", substr("siwgcf", k, 1)
		for (i = 0; i < nu; i++) printf " %s/%s", up[i], kind[k]
		printf "\n"
	}
	nl = 0  # a number, not the empty string an unset name is as a subscript
	for (i = nmj - 1; i >= 0 && i >= nmj - 192; i--) { tp[nl] = mj[i % 192]; tw[nl] = mjn[i % 192]; tj[nl++] = 1 }
	for (i = nt - 1; i >= 0 && i >= nt - 192 && nl < 192; i--) { tp[nl] = mt[i % 192]; tw[nl] = mtn[i % 192]; nl++ }
	# how many threads of each to read (besides its main one), maxthr in all: those of the job up to 64
	# each, then every other one up to 8 before any gets more (newest first): a crowd of newer
	# programs of 64 threads took the whole bound, and the 2 threads of the server a job waited on
	# went unread (HEALTHY, in a CI run of the project); a server of a few threads is read on any host
	left = maxthr
	for (pass = 1; pass <= 3; pass++)
		for (i = 0; i < nl; i++) {
			if ((pass == 1) != (i in tj)) continue
			tn = tw[i] - 1
			if (tn > 64) tn = 64
			if (pass == 2 && tn > 8) tn = 8
			tn -= ta[i]
			if (tn > left) tn = left
			if (tn > 0) { ta[i] += tn; left -= tn }
		}
	for (i = 0; i < nl; i++) print "+" ta[i] + 0 " " tp[i]
	for (i = ntt - 1; i >= 0 && i >= ntt - 32; i--) print tt[i % 32]
	for (i = ns - 1; i >= 0 && i >= ns - 256 && nsib < 32; i--) if (sk[i % 256] in mk) { print sp[i % 256]; nsib++ }
	for (i = 0; i < nun; i++) print un[i]
	for (i = npy - 1; nj == 0 && i >= 0 && i >= npy - 8; i--) print pyl[i % 8]
}'

# Every process's stat first, through a file list from one readdir of /proc (a glob like
# /proc/[0-9]*/stat would stat every path it matches: a third of the cost of reading them).
# Kernel threads have no status, io, cmdline or fds worth reading, and a many-core host runs more
# of them than user processes, so the other lists name user processes only.
# Multi-threaded processes (the newest 192) also get the state and wait channel of up to 64 threads
# each, at most VP_MAXTHR in all, read by the same grep: a worker thread stuck in the kernel (or
# the NVIDIA driver), or a feeder thread writing a full pipe, while the main thread sleeps.
vp_lists() {
	set -- /proc/[0-9]*
	vp_lstat=$(printf '%s/stat ' "$@")
	vp_st=$(vp_proc_grep "$vp_lstat" 2>&1)
	vp_lthr=
	vp_lenv=
	vp_lz=
	vp_lpy=
	vp_ls=
	vp_li=
	vp_lw=
	vp_lg=
	vp_lcmd=
	vp_lfd=
	# a line a word: the lists hold spaces
	vp_ifs=$IFS
	IFS=$VP_NL
	for vp_w in $(printf '%s\n' "$vp_st" | awk -v py="$VP_PYSPY" -v jobs="$VP_JOBPIDS" -v me="${VP_PARENT:-0}" -v maxthr="$VP_MAXTHR" "$VP_KIND_AWK$VP_USER_AWK"); do
		case $vp_w in
		+*)
			vp_tw=${vp_w#+}
			vp_threads "${vp_tw#* }" "${vp_tw%% *}"
			;;
		e*) vp_lenv="$vp_lenv ${vp_w#e}/environ" ;;
		z*) vp_lz="$vp_lz ${vp_w#z}/sched" ;;
		y*) vp_lpy="$vp_lpy ${vp_w#y}" ;;
		s*) vp_ls=${vp_w#s} ;;
		i*) vp_li=${vp_w#i} ;;
		w*) vp_lw=${vp_w#w} ;;
		g*) vp_lg=${vp_w#g} ;;
		c*) vp_lcmd=${vp_w#c} ;;
		f*) vp_lfd=${vp_w#f} ;;
		esac
	done
	IFS=$vp_ifs
	vp_l0="$vp_ls $vp_li $vp_lw $vp_lg $vp_lthr"
	# zombies (at most 64): when each last ran, that is when it exited, by the scheduler's clock;
	# this shell's own last run is that clock's "now" (sched exists with CONFIG_SCHED_DEBUG)
	if [ -n "$vp_lz" ]; then vp_l0="$vp_l0 $vp_lz /proc/$$/sched"; fi
	vp_l1=
	if [ "$VP_SAMPLE" != 0 ]; then vp_l1="$vp_lstat $vp_li $vp_ls"; fi
}

# vp_threads /proc/PID N: the wait channel of N of its threads but the main one (the allowance
# VP_USER_AWK gave it; the s0 awk picks the threads whose name and state are worth a read); and its
# environ, of which only the distributed-training variables are kept (VP_ENVPAT). The list grows by
# one append per process: dash copies a string char by char, and an append per thread cost 10 ms at
# 600 threads.
vp_threads() {
	vp_lenv="$vp_lenv $1/environ"
	vp_i=$2
	[ "$vp_i" -gt 0 ] || return 0
	vp_main=$1/task/${1##*/}
	vp_c=
	for vp_t in "$1"/task/*; do
		[ "$vp_t" != "$vp_main" ] || continue
		[ "$vp_i" -gt 0 ] || break
		vp_c="$vp_c $vp_t/wchan"
		vp_i=$((vp_i - 1))
	done
	vp_lthr="$vp_lthr$vp_c"
}

# Awk that stops a section at CAP bytes: it marks the cut with a "cut" frame line.
VP_CAP_AWK='BEGIN { B = ENVIRON["VP_B"] }
function out(line) {
	if (cut) return
	n += length(line) + 1
	if (n > cap) { cut = 1; printf "\n@@%s@@ cut\n", B } else print line
}'

# s0.proc, then the cgmap and cgmem sections from the same read: the awk passes the grep's
# lines through (capped) and keeps the memory-cgroup ones, so no cgroup file is read twice.
# Memory cgroups become "M<TAB>v1|v2<TAB>cgroup path<TAB>directory" lines (at most 64), each
# with the counter files it has ("F<TAB>file"), which the awk then reads itself.
vp_s0() {
	printf '\n@@%s@@ s0.proc\n' "$VP_B"
	exec 4>&1
	# the awk's stdout is the section; its stderr, captured, lists the syscall files worth reading
	vp_lsys=$({ {
		printf '%s\n' "$vp_st"
		vp_proc_grep "$vp_l0" 2>&1
	} | VP_B=$VP_B awk -v cap="$VP_MAXPROC" -v max=64 -v jp="$VP_JOBPIDS" "$VP_CAP_AWK$VP_KIND_AWK"'
	BEGIN { njp = split(jp, jpw, " "); for (i = 1; i <= njp; i++) jq["/proc/" jpw[i]] = 1 }
	# a --pid process or one of its descendants (through the parents the stat lines name), once a process
	function injob(q, n, a) {
		if (q in ijm) return ijm[q]
		for (a = q; n < 64; n++) {
			if (a in jq) return ijm[q] = 1
			if (!(a in pp) || pp[a] == a) break
			a = pp[a]
		}
		return ijm[q] = 0
	}
	FILENAME == "/proc/self/mountinfo" {
		FD_WAIT = "^_*(pipe_|anon_pipe_|fifo_|wait_for_partner|wait_woken|sk_wait|sk_stream_wait|unix_|skb_wait|tcp_recvmsg|inet_wait_for_connect|sock_alloc_send|locks_|flock_|posix_lock|fcntl_setlk|break_lease|request_wait_answer|fuse_)"
		SOCK_WAIT = "^_*(wait_woken|sk_wait|sk_stream_wait|unix_|skb_wait|tcp_recvmsg|inet_wait_for_connect|sock_alloc_send)"
		POLL_WAIT = "^_*(poll_schedule_timeout|do_sys_poll|do_select|core_sys_select|ep_poll|do_epoll_wait)"
		FUTEX_WAIT = "^_*futex_"
		TIMER_WAIT = "^_*(hrtimer_nanosleep|do_nanosleep|clock_nanosleep)"
		EPOLL_WAIT = "^_*(ep_poll|do_epoll_wait)"
		for (i = 7; i <= NF; i++) if ($i == "-") break
		if ($(i + 1) ~ /^fuse/ && n_fuse < 256) fuse[++n_fuse] = $3 " " $5 " " $(i + 1) " " $(i + 2)
		if ($(i + 1) == "cgroup2") { v2m = $5; v2r = $4 }
		else if ($(i + 1) == "cgroup" && ("," $(i + 3) ",") ~ /,memory,/) { v1m = $5; v1r = $4 }
		next
	}
	index($0, "/stat:") && $0 ~ /^\/proc\/[0-9]+\/(task\/[0-9]+\/)?stat:/ {
		s = $0
		while ((i = index(s, ") ")) > 0) s = substr(s, i + 2)
		p = substr($0, 1, index($0, "/stat:") - 1)
		st[p] = substr(s, 1, 1)
		if (split(s, f, " ") >= 18 && f[18] > 1) mt[p] = 1
		if (!index(p, "/task/")) {
			pp[p] = "/proc/" f[2]
			if (mt[p] == 1) kd[p] = prog_kind($0, s, f[2])
		}
	}
	{ out($0) }
	# the system call is worth reading (it needs root) for a sleeping or D-state task whose wait
	# channel leaves the fd open (pipes, sockets, locks, FUSE), polls (its fd count and timeout),
	# says nothing ("0" where the unwinder cannot name it), or, in a multi-threaded process where a
	# task waits on an fd or every task on a futex, waits on a futex (with a timeout, or for another
	# thread). Threads too
	# (task/TID), within their bound: of a thread only the wait channel is read here; its stat (name
	# and state) is read with the system calls where it waits on something else than a futex or runs
	# ("0", whose state is not known here: the syscall of a running thread is cheap, but no reason
	# for ss).
	# getline cannot read it: mawk aborts on the EPERM a read can give.
	index($0, "/wchan:") && $0 ~ /^\/proc\/[0-9]+\/(task\/[0-9]+\/)?wchan:/ {
		i = index($0, "/wchan:")
		p = substr($0, 1, i - 1)
		w = substr($0, i + 7)
		q = p
		if ((i = index(p, "/task/")) > 0) {
			q = substr(p, 1, i - 1)
			mt[p] = 1
			ntk[q]++
			if (w ~ FUTEX_WAIT) nfq[q]++
			else if (w ~ TIMER_WAIT) ntm[q]++
			else if (w ~ EPOLL_WAIT) npl[q]++
			if (w !~ FUTEX_WAIT) print p "/stat" > "/dev/stderr"
			if (w == "0") { print p "/syscall" > "/dev/stderr"; next }
		} else if (st[p] != "S" && st[p] != "D") next
		else if (w ~ FUTEX_WAIT && st[p] == "S") mfx[p] = 1
		else if (w ~ POLL_WAIT && st[p] == "S") mep[p] = 1
		if (w == "0" || w ~ FD_WAIT || w ~ POLL_WAIT) {
			print p "/syscall" > "/dev/stderr"
			# an epoll waiter: its interest lists (fdinfo tfd lines) say which fds it waits on
			# (64 of the host, in the order of their PIDs, and those of the job besides)
			if (w ~ EPOLL_WAIT && !(q in epw) && (injob(q) ? nepj++ < 64 : nep++ < 64)) { epw[q] = 1; print "@epoll" q > "/dev/stderr" }
			if (w ~ SOCK_WAIT || w ~ POLL_WAIT || w == "0") need_ss = 1
			if (w != "0" && w ~ FD_WAIT) fdw[q] = 1
		} else if (w ~ /^_*(do_syscall_64|do_sigtimedwait)($|[.])/) {
			# a nanosleep resumed after a stop or a ptrace attach (restart_syscall), a wait for a signal:
			# whether it has a deadline is in its arguments
			print p "/syscall" > "/dev/stderr"
		} else if (q == p && !mt[p] && w ~ FUTEX_WAIT && st[p] == "S" && n1fx++ < 256) {
			# a single-threaded process asleep on a futex: no thread of its own can wake it unless
			# the futex is shared (its op says), and a private one is a lock held across fork
			print p "/syscall" > "/dev/stderr"
		} else if (mt[p] && w ~ FUTEX_WAIT && nfx < 4096) {
			# the timeout of a futex wait says whether it waits for another thread: worth it only in
			# a process where some task waits on an fd (a thread in a loop of waits), decided at END
			fx[++nfx] = p
			fxq[nfx] = q
		}
	}
	n_cg < max && index($0, "/cgroup:") && $0 ~ /^\/proc\/[0-9]+\/cgroup:/ {
		line = substr($0, index($0, "/cgroup:") + 8)
		a = index(line, ":"); rest = substr(line, a + 1); b = index(rest, ":")
		ctl = substr(rest, 1, b - 1); p = substr(rest, b + 1)
		if (ctl == "" && v2m != "") { v = "v2"; m = v2m; r = v2r }
		else if (("," ctl ",") ~ /,memory,/ && v1m != "") { v = "v1"; m = v1m; r = v1r }
		else next
		rel = p
		if (r != "/" && index(p, r) == 1) rel = substr(p, length(r) + 1)
		if (rel == "/") rel = ""
		k = v "\t" p
		if (k in seen) next
		seen[k] = 1
		cg[++n_cg] = "M\t" v "\t" p "\t" m rel
		dir[n_cg] = m rel
		ctr[n_cg] = v == "v1" ? "oom_control failcnt max_usage_in_bytes limit_in_bytes usage_in_bytes" : "events max high peak current"
	}
	END {
		# and in a process whose every task waits on a futex (at most 64 such): untimed and private
		# everywhere, no thread is left to wake another (threads deadlocked); or on a futex but for
		# threads asleep on a timer (a heartbeat beside threads that may be deadlocked)
		# (those with no sleeper first: the bound is for the whole machine, and Python programs with a timer
		# thread are many)
		# or whose main task waits in a poll or epoll and every other on a futex: an event loop beside threads
		# that may hold what it waits for (a coroutine holding a lock awaits run_in_executor of what takes it),
		# a threaded server whose request threads are locked beside its accepting loop
		# The processes of the job (--pid and their descendants) first: idle Python programs elsewhere on
		# the host, each a main thread joining a worker on a queue, took the 64 and left the deadlock of
		# the job unread (HEALTHY). Then in the order of their threads (the newest first, as listed; the
		# main tasks came first, in the order of their PIDs: the oldest), at most 4 of one kind (parent
		# and name) before any gets more: 70 copies of one idle program took the 64 and left the
		# threads of the server a job waited on unread (HEALTHY, in a CI run of the project)
		# (in each pass those with no sleeper first, then those beside timers)
		for (pass = njp ? 1 : 2; pass <= 3; pass++)
			for (sleepers = 0; sleepers <= 1; sleepers++)
				for (i = 1; i <= nfx; i++) {
					q = fxq[i]
					if (fx[i] == q || (q in fdw) || (q in dlk) || ndl >= 64 || (pass == 1 && !injob(q))) continue
					if (pass == 2 && nkd[kd[q]] >= 4) continue
					if (sleepers ? ((q in mfx) && ntk[q] == nfq[q] + ntm[q] && nfq[q] >= 1) : (((q in mfx) || (q in mep)) && ntk[q] == nfq[q])) {
						dlk[q] = 1
						ndl++
						nkd[kd[q]]++
					}
				}
		for (i = 1; i <= nfx; i++) if ((fxq[i] in fdw) || (fxq[i] in dlk)) print fx[i] "/syscall" > "/dev/stderr"
		# and, in a process whose main task waits on a futex and every other on a futex, a timer or an
		# event loop (a gloo rank: its tcp loop polls, its run loops wait for work or, inside a
		# collective, on a peer with the group timeout), the name and system call of its futex
		# threads (at most 16 such processes): which rank has not entered the collective the others
		# wait in
		for (i = 1; i <= nfx; i++) {
			q = fxq[i]
			if (fx[i] == q || (q in fdw) || (q in dlk) || !(q in mfx) || !(q in npl)) continue
			if (ntk[q] != nfq[q] + ntm[q] + npl[q] || (!(q in gpl) && ngp >= 16)) continue
			if (!(q in gpl)) { gpl[q] = 1; ngp++ }
			print fx[i] "/stat" > "/dev/stderr"
			print fx[i] "/syscall" > "/dev/stderr"
		}
		# the main task alone, where it waits on a futex beside other threads (a rank in a collective):
		# whether its wait has a deadline says whether it wakes by itself (at most 256; whatever its other
		# threads do: the loop of a torch rank caught awake, its wait channel 0, left it unread)
		for (q in mfx)
			if (!(q in fdw) && !(q in dlk) && ntk[q] >= 1 && nml++ < 256)
				print q "/syscall" > "/dev/stderr"
		# the processes of the job (--pid and their descendants, at most 256), for the fd section: the
		# network namespaces of their sockets are read first
		if (njp) for (q in pp) if (!index(q, "/task/") && injob(q) && nij++ < 256) print "@job" q > "/dev/stderr"
		if (!cut) printf "\n@@rc=0\n"
		printf "\n@@%s@@ /s0.proc\n\n@@%s@@ cgmap\n", B, B
		for (i = 1; i <= n_cg; i++) {
			print cg[i]
			nf = split(ctr[i], f, " ")
			for (j = 1; j <= nf; j++) print "F\t" dir[i] "/memory." f[j]
		}
		printf "\n@@rc=0\n\n@@%s@@ /cgmap\n\n@@%s@@ cgmem\n", B, B
		got = 0
		for (i = 1; i <= n_cg; i++) {
			nf = split(ctr[i], f, " ")
			for (j = 1; j <= nf; j++) {
				file = dir[i] "/memory." f[j]
				while ((getline l < file) > 0) {
					print file ":" l
					got = 1
					if (l ~ /^oom_kill [1-9]/) oomk = 1
				}
				close(file)
			}
		}
		printf "\n@@rc=%d\n\n@@%s@@ /cgmem\n\n@@%s@@ mounts\n", got ? 0 : 1, B, B
		# each mount: requests waiting for its server (the fusectl counter, a sysfs read that never
		# touches the mount): on a host with several FUSE mounts, the one a waiter hangs on
		for (i = 1; i <= n_fuse; i++) {
			split(fuse[i], fd_, " ")
			split(fd_[1], dn, ":")
			w = ""
			wf = "/sys/fs/fuse/connections/" (dn[1] * 1048576 + dn[2]) "/waiting"
			if ((getline w < wf) > 0 && w ~ /^[0-9]+$/) print fuse[i] " w=" w
			else print fuse[i]
			close(wf)
		}
		printf "\n@@rc=0\n\n@@%s@@ /mounts\n\n@@%s@@ locks\n", B, B
		nl = 0
		while (nl < 4096 && (getline l < "/proc/locks") > 0) { print l; nl++ }
		printf "\n@@rc=%d\n\n@@%s@@ /locks\n", nl < 4096 ? 0 : 3, B
		# status: 1 a process waits on or polls a socket (ss is worth a fork); 2 a memory cgroup
		# counts an OOM kill (the kernel log is worth a second look if dmesg has no line for it)
		exit (need_ss ? 1 : 0) + (oomk ? 2 : 0)
	}' /proc/self/mountinfo - 2>&3; } 3>&1 1>&4)
	vp_rc=$?
	case $vp_rc in 1 | 3) VP_SSNEED=$VP_SS ;; *) VP_SSNEED=0 ;; esac
	case $vp_rc in 2 | 3) VP_OOMC=1 ;; *) VP_OOMC=0 ;; esac
	exec 4>&-
}

# syscall of the processes and threads the s0 awk picked, and the stat of the threads whose name and
# state it wants, one grep (nothing to read: no fork at all).
vp_syscall() {
	vp_l=
	for vp_f in $vp_lsys; do
		case $vp_f in /proc/*/syscall | /proc/*/task/*/stat) vp_l="$vp_l $vp_f" ;; esac
	done
	[ -z "$vp_l" ] || vp_many "$vp_l" grep -H ''
}

# The second sample: stat records, io counters, and of status the main thread's voluntary context
# switches alone (a job that only sends and receives on sockets counts no tick and no vfs byte)
VP_PROC_PAT1="^([0-9]+ \\(|(rchar|wchar|read_bytes|write_bytes|voluntary_ctxt_switches):)|\\) [A-Za-z] -?[0-9]"
vp_s1() { vp_many "$vp_l1" grep -H -E "$VP_PROC_PAT1" 2>&1 | VP_B=$VP_B awk -v cap="$VP_MAXPROC" "$VP_CAP_AWK"'{ out($0) }'; }

# The files the processes hold open write-only whose names say log (and their stdout and stderr): the
# job's logs where none was given. stat through /proc/PID/fd/N, the open file itself (a path
# renamed or deleted since is still the one written); at most 128. Then the last VP_HTAIL bytes of
# 4 regular files, those held by a --pid process or its descendants first (VP_JOBPIDS; each holder's
# ancestry read from /proc/PID/stat, 16 generations at most), then those written last, read
# through the same /proc/PID/fd/N (what the process holds:
# no path, so no link planted in one, is followed), each line prefixed as a --log's tail is: the
# line that says why the job stopped, where no --log was given. Its guard (vp_held_sec) is its
# timeout: a stat or read that hangs is abandoned after VP_FILE_T seconds, and killed at the end.
vp_held_stat() {
	[ -z "$vp_held" ] || stat -L -c '%n %s %Y %i %F' -- $vp_held | awk -v t="$VP_HTAIL" -v jp="$VP_JOBPIDS" '
		# a holder of many held files has its ancestry read once (known[]: 1 of the job, 0 not)
		function ofjob(p,   g, l, path, fld, q) {
			q = p
			if (q in known) return known[q]
			for (g = 0; g < 16 && p > 1; g++) {
				if (p in job) return known[q] = 1
				path = "/proc/" p "/stat"
				l = ""
				getline l < path
				close(path)
				sub(/.*\) /, "", l)
				split(l, fld, " ")
				p = fld[2] + 0
			}
			return known[q] = 0
		}
		# the real and effective uids of a holder, " r e ", from its status (" 0 " for root: it may read
		# any); " - " when it is gone: nothing of it is read
		function uids(p,   path, l, f, r) {
			path = "/proc/" p "/status"
			r = " - "
			while ((getline l < path) > 0) if (l ~ /^Uid:/) { split(l, f, " "); r = " " f[2] + 0 " " f[3] + 0 " "; break }
			close(path)
			return r
		}
		BEGIN { m = split(jp, j, " "); for (i = 1; i <= m; i++) job[j[i]] = 1 }
		{ print }
		t > 0 && $2 > 0 && / regular file$/ && $1 ~ /^\/proc\/[0-9]+\/fd\/[0-9]+$/ {
			name[++n] = $1
			split($1, q, "/")
			mt[n] = (m && ofjob(q[3] + 0) ? 1e12 : 0) + $3
		}
		END {
			for (k = 0; k < 4; k++) {
				b = 0
				for (i = 1; i <= n; i++) if (!(i in used) && (b == 0 || mt[i] + 0 > mt[b] + 0)) b = i
				if (b == 0) break
				used[b] = 1
				print "@@tail " name[b]
				split(name[b], q, "/")
				ids = uids(q[3])
				# opened once, and read only where the file opened is the holder s own, or while the
				# holder s fd is a write fd (no O_PATH) on that very inode: a tenant that swapped the fd
				# for an O_PATH one on a root-only file between the listing and this read had its
				# content read as root (found by a helper); a job run as a user into a log root opened
				# for it (runuser, systemd append:) is still read
				if (ids ~ / 0 /) cmd = "exec tail -c " t " -- " name[b] " 2>/dev/null"
				else cmd = "exec 3<" name[b] " 2>/dev/null || exit; o=$(stat -L -c %u:%i /proc/self/fd/3); " \
					"case \"" ids "\" in *\" ${o%:*} \"*) exec tail -c " t " <&3 ;; esac; f=; i=; " \
					"while read -r k v; do case $k in flags:) f=$v ;; ino:) i=$v ;; esac; done </proc/" q[3] "/fdinfo/" q[5] "; " \
					"[ -n \"$f\" ] && [ \"$i\" = \"${o#*:}\" ] && [ $((f & 3)) != 0 ] && [ $((f & 010000000)) = 0 ] && exec tail -c " t " <&3"
				while ((cmd | getline l) > 0) print "|" l
				close(cmd)
			}
		}'
}
# The held files may be on a dead mount (timeout cannot end a stat in D state): in a guarded child,
# framed here, not by secn (whose redirection a guard must not run under).
vp_held_sec() {
	printf '\n@@%s@@ held\n' "$VP_B"
	[ -z "$vp_held" ] || vp_guard vp_held_stat
	printf '\n@@rc=0\n\n@@%s@@ /held\n' "$VP_B"
}

# Who is who in a distributed job: from the environ of the multi-threaded processes (ranks are), the
# allow-listed names only (rank, world, rendezvous, job id, GPUs, NCCL and flight-recorder settings;
# and, of processes asleep on a terminal, the tmux pane or screen window it is);
# nothing else of an environment is ever printed: secrets live there. At most 48 names of 256 bytes
# per process.
VP_ENVPAT='^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_RUN_ID|SLURM_JOB_ID|SLURM_PROCID|CUDA_VISIBLE_DEVICES|NCCL_[A-Z0-9_]+|TORCH_NCCL_[A-Z0-9_]+|TORCH_FR_[A-Z0-9_]+|TMUX|TMUX_PANE|STY|WINDOW)='
vp_env() {
	vp_frp=
	[ -n "$vp_lenv" ] || return 0
	exec 4>&1
	# the section on stdout; on stderr, captured, where the flight recorder dumps (its prefixes)
	vp_frp=$({ vp_many "$vp_lenv" tmo 10 grep -H -z -E "$VP_ENVPAT" 2>/dev/null | tr '\000\n' '\n\036' |
		VP_B=$VP_B awk -v cap=262144 -v pat="$VP_ENVPAT" "$VP_CAP_AWK"'
		# an entry is kept only when it starts with an allowed name and holds no newline: BusyBox
		# grep -z anchors ^ after a newline inside a value too, so "X=secret\nRANK=1" matched whole
		{ i = index($0, ":"); f = substr($0, 1, i - 1); e = substr($0, i + 1) }
		e !~ pat || index(e, "\036") { next }
		# nor a name that says secret, whatever prefix the list admits it by (NCCL_IB_SECRET, NCCL_PWD)
		substr(e, 1, index(e, "=")) ~ /(PASS|SECRET|TOKEN|KEY|CRED|AUTH|(^|_)PWD?[_=])/ { next }
		{ if (++c[f] <= 48) out(substr($0, 1, i + 256)) }
		/:(TORCH_NCCL_DEBUG_INFO_TEMP_FILE|TORCH_FR_DUMP_TEMP_FILE)=\// && np < 8 {
			# 8 distinct prefixes: the ranks of one job all name the same one
			v = substr($0, index($0, "=") + 1)
			if (length(v) < 512 && v !~ /[\036*?[]/ && !(v in seen)) { seen[v] = 1; np++; print v > "/dev/stderr" }
		}' 2>&3; } 3>&1 1>&4)
	exec 4>&-
}

# PyTorch flight recorder dumps: the default prefix and the ones the ranks name, followed by digits
# (the rank). Only regular files (no link), whose first byte is a pickle's (0x80), at most 8 of
# them, 1 MiB of each in base64, after `@fr MTIME PATH`: the client reads them without running
# pickle code. At most VP_FR_NAMES names are looked at under each prefix (a tenant's 20,000 empty
# files cost the deadline; an empty one costs no fork); past it `@fr-cut PREFIX` says the rest were not.
# A prefix is tenant-named: a directory on a FUSE mount with requests waiting is not listed, and the
# section runs guarded (vp_guard) when a rank named one, so a dead mount costs VP_FILE_T seconds,
# not the probe.
VP_FR_NAMES=64
# Guarded where a path may hang: a prefix a rank named, /tmp on a FUSE mount, or any name under the
# default prefix (a tenant's link in /tmp into a dead FUSE mount put the probe's own shell in D state
# for good, and a dump swapped for a FIFO held it to its deadline; found by a helper). Listing /tmp
# by the glob reads its directory alone, no entry. A guard's child is an orphan its init must reap:
# a /tmp with no dump needs none.
vp_fr_sec() {
	vp_fuse_waiting /tmp/
	vp_frd=
	for vp_f in /tmp/nccl_trace_rank_[0-9]*; do
		case $vp_f in /tmp/nccl_trace_rank_[0-9]*) vp_frd=1 ;; esac
		break
	done
	if [ -z "$vp_frp" ] && [ -z "$vp_fdev" ] && [ -z "$vp_frd" ]; then
		secn fr vp_fr
		return 0
	fi
	# 8 dumps of 1 MiB, base64'd, take a few seconds on a loaded host: more than a stat's 5 s bound
	vp_guard_for 15 secn fr vp_fr
}
vp_fr() {
	vp_frn=0
	vp_ifs=$IFS
	IFS=$VP_NL
	set -- /tmp/nccl_trace_rank_ $vp_frp
	IFS=$vp_ifs
	vp_magic=
	# prefixes on FUSE mounts last: a mount that hangs the guarded child then costs no other's dumps
	vp_frf=
	for vp_p; do
		! vp_untouchable "${vp_p%/*}/" || continue
		if [ -n "$vp_fdev" ]; then vp_frf="$vp_frf$vp_p$VP_NL"; else vp_fr_prefix "$vp_p"; fi
	done
	IFS=$VP_NL
	set -- $vp_frf
	IFS=$vp_ifs
	for vp_p; do vp_fr_prefix "$vp_p"; done
}

# vp_fr_prefix PREFIX: the dumps under one prefix, within the bounds above.
vp_fr_prefix() {
	vp_frc=0
	for vp_f in "$1"[0-9]*; do
		[ "$vp_frn" -lt 8 ] || return 0
		case $vp_f in "$1"[0-9]*) ;; *) continue ;; esac
		vp_frc=$((vp_frc + 1))
		if [ "$vp_frc" -gt "$VP_FR_NAMES" ]; then
			printf '@fr-cut %s\n' "$1"
			return 0
		fi
		# not touched where a mount on the name has requests waiting (by name), nor followed (lstat)
		! vp_untouchable "$vp_f" >/dev/null || continue
		[ ! -h "$vp_f" ] || continue
		[ -f "$vp_f" ] && [ -s "$vp_f" ] || continue
		# a pickle's first byte, made (a fork) only when some file may be a dump
		[ -n "$vp_magic" ] || vp_magic=$(printf '\200')
		# opened once and read through that descriptor, only if it is the file checked (vp_same); the
		# checks again right before the open, past the fork: a FIFO renamed in between blocks the open
		# (bounded by the section's guard)
		(
			[ ! -h "$vp_f" ] && [ -f "$vp_f" ] || exit 1
			exec 5<"$vp_f" || exit 1
			vp_same "$vp_f" >/dev/null || exit 1
			[ "$(tmo 5 head -c 1 /proc/self/fd/5)" = "$vp_magic" ] || exit 1
			# its mtime first: a dump older than the job's ranks is an earlier run's
			vp_mt=$(tmo 5 stat -L -c %Y /proc/self/fd/5 2>/dev/null)
			case $vp_mt in '' | *[!0-9]*) vp_mt=- ;; esac
			printf '@fr %s %s\n' "$vp_mt" "$vp_f"
			tmo 5 head -c 1048576 /proc/self/fd/5 | base64
		) 2>/dev/null && vp_frn=$((vp_frn + 1))
	done
}

# With --py-spy (VP_PYSPY=1): where 8 Python programs are (those under --pid, else the newest), as
# py-spy reads them from their memory without stopping them (--nonblocking; it writes nothing).
# Each dump at most 3 s and 64 KiB, every line prefixed (a frame's name is the program's to
# choose); no dump starts after 12 s.
# The section runs in a guarded child: reading the memory of a process stuck on a dead mount can
# put the reader in D state, which no timeout ends.
# Dumps are taken with --locals (each frame's arguments and locals) to name the file a polling lock
# waits for, but locals can hold secrets: VP_PYSPY_AWK lets out only the names of VP_PYLOCALS, each
# value cut at 512 characters; every other line under "Arguments:" and "Locals:" stays here.
VP_PYLOCALS='lock_filename canonical_path lock_file lock_file_path build_directory self'
VP_PYSPY_AWK='BEGIN { n = split(keep, k, " "); for (i = 1; i <= n; i++) ok[k[i]] = 1 }
function out(s) {
	if ((c += length(s) + 2) > cap) { print "@cut"; exit }
	print "|" s
}
/^        (Arguments|Locals):/ { blk = 1; next }
# a name and its value (py-spy writes a newline in a string as \n); self only as its type name
blk && /^            [A-Za-z_][A-Za-z0-9_]*: / {
	i = index($0, ": ")
	nm = substr($0, 13, i - 13)
	v = substr($0, i + 2)
	if (!(nm in ok) || (nm == "self" && v !~ /^<[A-Za-z_][A-Za-z0-9_.]* at 0x[0-9a-fA-F]+>$/)) next
	out("            " nm ": " substr(v, 1, 512))
	next
}
# still in the block unless a frame or a thread begins: anything else is part of a value
blk && !/^    [^ ].* \([^()]*\)$/ && !/^Thread [0-9A-Fa-fx]+ \(/ { next }
# a line of a local outside a block: py-spy writes none, but the program chooses the names of
# its variables, and one holding a newline and a frame line ended the block for the next to pass
/^            / { blk = 0; next }
{ blk = 0; out($0) }'
vp_pystack_sec() { vp_guard_for 16 secn pystack vp_pystack; }
vp_pystack() {
	vp_has py-spy || {
		printf '@@absent\n'
		return 0
	}
	vp_secs
	vp_py0=$vp_u
	vp_pyl=--locals
	for vp_p in $vp_lpy; do
		vp_secs
		if [ $((vp_u - vp_py0)) -ge 12 ]; then
			printf '@@budget\n'
			return 0
		fi
		printf '@pyspy %s\n' "${vp_p#/proc/}"
		vp_o=$(vp_spy "${vp_p#/proc/}" $vp_pyl)
		case $vp_pyl$vp_o in
		--locals*'|Thread '*) ;;
		--locals*)
			# no thread: a py-spy that refuses --locals (it names the option: not asked again), or
			# one that could not read a frame's locals; the stack alone, while there is time
			case $vp_o in *--locals*) vp_pyl= ;; esac
			vp_secs
			[ $((vp_u - vp_py0)) -ge 9 ] || vp_o=$(vp_spy "${vp_p#/proc/}")
			;;
		esac
		printf '%s\n' "$vp_o"
	done
}
vp_spy() {
	tmo 3 py-spy dump --nonblocking $2 --pid "$1" 2>&1 </dev/null |
		awk -v cap=65536 -v keep="$VP_PYLOCALS" "$VP_PYSPY_AWK"
}

# argv records, NUL -> newline (a newline inside an argument becomes \036), at most 64
# arguments of 1024 bytes per process. A process gone since the listing is not worth an error
# line (its stat already says so), and errors would bypass the awk's cap.
vp_cmdline() {
	vp_many "$vp_lcmd" tmo 20 grep -H -z '' 2>/dev/null | tr '\000\n' '\n\036' |
		VP_B=$VP_B awk -v cap="$VP_MAXPROC" "$VP_CAP_AWK"'
		{ i = index($0, ":"); f = substr($0, 1, i - 1); if (++c[f] <= 64) out(substr($0, 1, 1100)) }'
}

# fd links (the link mode tells read end from write end), at most VP_MAXFD per process. GNU ls -b
# escapes link targets (a path holding a newline cannot pass for another line); BusyBox ls prints
# control characters as '?'. The same awk then reads the socket tables, keeping only sockets the
# listed fds hold: the probe's own network namespace's (/proc/self/net), then, for a held socket
# found in none read yet, the tables of a process holding it (another namespace: a container),
# at most 16 times. ss names Unix sockets' peers (/proc/net/unix has none), only when a process
# waits on a socket.
vp_fd() {
	printf '\n@@%s@@ fd\n' "$VP_B"
	# epoll waiters, whose interest lists are read when fdinfo is ours to read (root)
	vp_ep=
	if [ -r /proc/1/syscall ]; then
		for vp_f in $vp_lsys; do
			case $vp_f in @epoll/proc/*) vp_ep="$vp_ep ${vp_f#@epoll}" ;; esac
		done
	fi
	# the processes of the job, then those waiting on an fd or polling (their system call was read, at
	# most 1024): the network namespaces of their sockets are read first, in that order
	vp_jb=
	vp_wt=
	vp_wn=0
	for vp_f in $vp_lsys; do
		case $vp_f in
		@job/proc/*) vp_jb="$vp_jb ${vp_f#@job/proc/}" ;;
		/proc/*/task/*) ;;
		/proc/*/syscall)
			vp_wn=$((vp_wn + 1))
			[ "$vp_wn" -gt 1024 ] && continue
			vp_f=${vp_f%/syscall}
			vp_wt="$vp_wt ${vp_f#/proc/}"
			;;
		esac
	done
	exec 4>&1
	# the sections on stdout; on stderr, captured, the fds held write-only on files named like logs
	vp_held=$({ vp_many "$vp_lfd" ls -ln$VP_LSB 2>&1 |
		VP_B=$VP_B awk -v cap="$VP_MAXPROC" -v max="$VP_MAXFD" -v ncap="$VP_MAXNET" -v ss="$VP_SSNEED" \
			-v ep="$vp_ep" -v wt="$vp_wt" -v jb="$vp_jb" "$VP_CAP_AWK"'
			function readns(p, label,   t, f, col, l, c, ino, miss) {
				out("@ns " label)
				for (t = 1; t <= 5; t++) {
					f = p "/net/" tabs[t]
					col = tabs[t] == "unix" ? 7 : 10
					while ((getline l < f) > 0) {
						split(l, c, " ")
						if (c[col] in held && !(c[col] in found)) { out(tabs[t] ":" l); found[c[col]] = 1 }
					}
					close(f)
				}
				# a held socket still not found may be one of a kind no table above lists (netlink,
				# packet, raw, ICMP, UDP-Lite: systemd, udev, a DHCP client hold them): those this
				# namespace lists are marked found, not printed, so their holders, in this same
				# namespace, do not have its tables read again (up to 16 times)
				miss = 0
				for (ino in held) if (!(ino in found)) { miss = 1; break }
				if (!miss) return
				for (t = 1; t <= 8; t++) {
					f = p "/net/" xtabs[t]
					col = xtabs[t] == "packet" ? 9 : 10
					while ((getline l < f) > 0) {
						split(l, c, " ")
						if (c[col] in held) found[c[col]] = 1
					}
					close(f)
				}
			}
			# the mounts of a mount namespace, read once (mount ids are the kernel'"'"'s, one set for all):
			# each FUSE mount'"'"'s count of requests waiting for its server (fusectl), else -1
			function mounts(f,   l, c, dn, w, wf) {
				while ((getline l < f) > 0) {
					split(l, c, " ")
					if (c[1] in fw) continue
					fw[c[1]] = -1
					if (l ~ / - fuse/) {
						split(c[3], dn, ":")
						w = ""
						wf = "/sys/fs/fuse/connections/" (dn[1] * 1048576 + dn[2]) "/waiting"
						if ((getline w < wf) > 0 && w ~ /^[0-9]+$/) fw[c[1]] = w + 0
						close(wf)
					}
				}
				close(f)
			}
			# a held file on a FUSE mount with requests waiting: its stat would wait there for good (a
			# tenant'"'"'s mount in its container hung the stat of probes outside it; found by a helper).
			# Its mount by the id in the holder'"'"'s fdinfo, looked up in its namespace'"'"'s mountinfo
			function deadfuse(p, fd,   f, l, id, c) {
				f = p "/fdinfo/" fd
				id = ""
				while ((getline l < f) > 0) if (l ~ /^mnt_id:/) { split(l, c, " "); id = c[2]; break }
				close(f)
				if (id == "") return 0
				if (!(id in fw) && !("self" in fw)) { fw["self"] = 1; mounts("/proc/self/mountinfo") }
				if (!(id in fw) && !(p in mread)) { mread[p] = 1; mounts(p "/mountinfo") }
				return (id in fw) && fw[id] > 0
			}
			BEGIN {
				n = split(ep, e, " "); for (i = 1; i <= n; i++) epw[e[i]] = 1
				# the ranks of holders whose namespaces are read first: 1 the processes of the job, 2 those whose
				# system call was read (they wait on an fd or poll)
				n = split(wt, e, " ")
				for (i = 1; i <= n; i++) first["/proc/" e[i]] = 2
				n = split(jb, e, " ")
				for (i = 1; i <= n; i++) first["/proc/" e[i]] = 1
			}
			/^\/proc\/[0-9]+\/fd:$/ { k = 0; pid = substr($0, 1, length($0) - 4); out($0); next }
			/^total / || /^$/ { next }
			{
				if (++k > max) { if (k == max + 1) out("@@more"); next }
				out($0)
				# an epoll fd of an epoll waiter: the fds it watches (at most 256 per process)
				if (pid in epw && index($0, " -> anon_inode:[eventpoll]") && ntfd[pid] < 256) {
					for (i = 1; i <= NF; i++) if ($i == "->") break
					f = pid "/fdinfo/" $(i - 1)
					while (ntfd[pid] < 256 && (getline l < f) > 0)
						if (l ~ /^tfd:/) { out("@epoll " $(i - 1) " " l); ntfd[pid]++ }
					close(f)
				}
				if ((i = index($0, " -> socket:[")) > 0) {
					ino = substr($0, i + 12, length($0) - i - 12)
					held[ino] = 1
					if (!(ino in holder)) holder[ino] = pid
				} else if (substr($0, 1, 4) == "l-wx" && (i = index($0, " -> /")) > 0 && nlog < 128) {
					# a file held open write-only: its stdout or stderr, or named like a log (the logs of the job
					# logs, found where none was given); each file once, by its first holder
					t = substr($0, i + 4)
					for (j = 1; j <= NF; j++) if ($j == "->") break
					fdn = $(j - 1)
					if (t ~ /^\/(dev|proc|sys)\// || t ~ / \(deleted\)$/ || (t in logseen)) next
					if (fdn == "1" || fdn == "2" || t ~ /(\.log|\.out|\.err|\.txt|log)[^\/]*$/) {
						logseen[t] = 1
						if (deadfuse(pid, fdn)) next
						nlog++
						print pid "/fd/" fdn > "/dev/stderr"
					}
				}
			}
			END {
				if (!cut) printf "\n@@rc=0\n"
				printf "\n@@%s@@ /fd\n\n@@%s@@ net\n", B, B
				cut = 0; n = 0; cap = ncap
				split("tcp tcp6 udp udp6 unix", tabs, " ")
				split("netlink packet raw raw6 icmp icmp6 udplite udplite6", xtabs, " ")
				readns("/proc/self", "self")
				# those of the job first, then of waiters (a client waiting on its server), then any, 16 in
				# all: the listeners of 40 containers took the 16 in hash order and left the namespace of a
				# client unread (HEALTHY; found by a helper); those of the job up to 64: a job of 40 clients, each
				# in a namespace of its own, left the one of a stopped server unread (found by a helper)
				for (r = 0; r < 64; r++) {
					p = ""
					for (rank = 1; rank <= (r < 16 ? 3 : 1) && p == ""; rank++)
						for (ino in held)
							if (!(ino in found) && !(holder[ino] in tried) && (rank == 3 || first[holder[ino]] == rank)) {
								p = holder[ino]
								break
							}
					if (p == "") break
					tried[p] = 1
					readns(p, substr(p, 7))
				}
				if (ss == 1) {
					# exec: the shell awk starts becomes ss (one fork, not two)
					while (("exec ss -xan 2>/dev/null" | getline l) > 0) {
						m = split(l, c, " ")
						if (c[m] in held || c[m - 2] in held) out("@ss " l)
					}
					close("exec ss -xan 2>/dev/null")
				}
				if (!cut) printf "\n@@rc=0\n"
				printf "\n@@%s@@ /net\n", B
			}' 2>&3; } 3>&1 1>&4)
	exec 4>&-
}

VP_KPAT='invoked oom-killer|oom-kill:|Kill(ed)? process|oom_reaper|Out of memory|Memory cgroup out of memory|memory: usage|Task in .* killed|NVRM: Xid|SXid|fallen off the bus|The NVIDIA GPU |blocked for more than|GPU is lost'

# The last 400 matching kernel-log lines (each cut at 4 KiB), plus how many lines the log had at all,
# and how its reader ended (`@@exit N`, from vp_kexit's marker: 124 or 137 when `tmo` killed it, so
# the client says "not read in time", never "no OOM kill"). Only a marker that ends the input is
# the reader's: one inside the log (a line the log's own text ends so) is the log's.
# (An awk's text, not a function: the last command of a pipeline is exec'd in the child the pipeline
# forks for it; a function there forks once more.)
VP_KFILTER='
		{ rc = "" }
		index($0, "@@exit ") && match($0, /@@exit [0-9]+$/) {
			rc = substr($0, RSTART + 7)
			$0 = substr($0, 1, RSTART - 1)
			if ($0 == "") { nx++; next }
		}
		NR <= 3 && /(not permitted|denied|failed|No journal files|No entries)/ { print "@@err " $0 }
		$0 ~ pat { buf[n % 400] = substr($0, 1, 4096); n++ }
		END {
			s = n > 400 ? n - 400 : 0; for (i = s; i < n; i++) print "|" buf[i % 400]
			if (rc != "") print "@@exit " rc
			print "@@lines " NR - nx
		}'

# vp_kexit CMD...: CMD's output, then `@@exit STATUS`: a reader that `tmo` killed (hung) says so,
# rather than passing for a short log.
vp_kexit() {
	"$@"
	printf '@@exit %s\n' "$?"
}

# dmesg under a timeout, read through a head under a timeout of its own: a dmesg that hangs is
# killed at 10 s (and its exit status says so), one that floods is cut at VP_KMAX bytes (the
# largest kernel ring buffer is 32 MiB), and a child it leaves holding the pipe (setsid) ends the
# read at 12 s.
vp_kmsg() {
	printf '@@source dmesg\n'
	vp_kexit tmo 10 dmesg $VP_DMESGK 2>&1 | tmo 12 head -c "$VP_KMAX" | awk -v pat="$VP_KPAT" "$VP_KFILTER"
}

vp_kmsg_fallback() {
	if vp_has journalctl; then
		printf '@@source journalctl\n'
		vp_kexit tmo 10 journalctl -k -b --no-pager -o short-monotonic 2>&1 | tmo 12 head -c "$VP_KMAX" |
			tail -n 20000 | awk -v pat="$VP_KPAT" "$VP_KFILTER"
	fi
	for vp_f in /var/log/kern.log /var/log/messages; do
		# the tenant's files (root in its container owns /var/log): read only as a regular file, never
		# one under /proc, /sys or /dev (a link to /proc/kmsg consumed the kernel's messages), nor on a
		# FUSE mount with requests waiting; the section runs guarded (a link into a dead FUSE mount put
		# the probe's own shell in D state for good; found by a helper)
		# (no kernel log lives on a FUSE mount: one is not touched, by the name or the link's target)
		vp_fuse_waiting "$vp_f"
		[ -z "$vp_fdev" ] || continue
		if [ -h "$vp_f" ]; then
			vp_untouchable_link "$vp_f" >/dev/null
			[ -z "$vp_fdev" ] || continue
			vp_kf=$(readlink -f -- "$vp_f" 2>/dev/null) || continue
			case $vp_kf/ in /proc/* | /sys/* | /dev/*) continue ;; esac
		fi
		if [ -f "$vp_f" ] && [ -r "$vp_f" ]; then
			printf '@@source %s\n' "$vp_f"
			vp_kexit tmo 10 tail -c 4000000 "$vp_f" | awk -v pat="$VP_KPAT" "$VP_KFILTER"
		fi
	done
}
# the fallback in a child the probe can abandon: journalctl's 12 s, then the files
vp_kmsg_fallback_sec() { vp_guard_for 15 secn kmsg.fallback vp_kmsg_fallback; }

# One query, with a header so the client reads columns by name. An unknown field fails the whole
# query (exit 2): then the older reasons name, then the oldest field set (each sample tries anew:
# `sec` runs this in a subshell, so nothing learnt here outlives it).
VP_GPUQ=index,uuid,name,pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,mig.mode.current
VP_GPUQ0=index,uuid,name,pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw
vp_gpu() {
	if ! vp_has nvidia-smi; then
		printf '@@absent\n'
		return 0
	fi
	if [ "$VP_GPU_HUNG" = 1 ]; then
		printf '@@skipped an earlier nvidia-smi call timed out\n'
		return 0
	fi
	for vp_q in "$VP_GPUQ,clocks_event_reasons.active" "$VP_GPUQ,clocks_throttle_reasons.active" \
		"$VP_GPUQ0,clocks_throttle_reasons.active"; do
		tmo "$VP_NVSMI_T" nvidia-smi --query-gpu="$vp_q" --format=csv,nounits
		vp_rc=$?
		[ "$vp_rc" -eq 2 ] || break
	done
	return $vp_rc
}

# /dev/nvidia<N>: one node per GPU the driver (or the container runtime) gave this system. A glob
# and builtins: no fork; at most 64 named.
vp_nvdev() {
	vp_c=0
	for vp_d in /dev/nvidia[0-9]*; do
		[ -e "$vp_d" ] || continue
		vp_c=$((vp_c + 1))
		[ "$vp_c" -gt 64 ] || printf '@@dev %s\n' "$vp_d"
	done
	printf '@@devs %s\n' "$vp_c"
}

vp_gpuapps() {
	vp_nvdev
	vp_has nvidia-smi || {
		printf '@@absent\n'
		return 0
	}
	[ "$VP_GPU_HUNG" != 1 ] || {
		printf '@@skipped an earlier nvidia-smi call timed out\n'
		return 0
	}
	tmo "$VP_NVSMI_T" nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,nounits
}

# ---- paths the operator (or the default /tmp) names: all on the tenant's side ----
# The probe's own shell never touches them: each section that does runs in a child the probe can
# abandon (vp_guard), so a dead mount (a FUSE server that never answers puts its callers in D
# state, which no signal ends) costs VP_FILE_T seconds, not the probe. Before touching a path the
# child looks its mount up in mountinfo (builtins) and, for a FUSE mount, its connection's count
# of requests waiting for the server (/sys/fs/fuse/connections/N/waiting): one with requests
# waiting is not touched at all (@@fuse-waiting N MOUNT).

# vp_alone CMD...: CMD with its stderr on its stdout (the pipe), not on the probe's own output: a
# child stuck on a dead mount must hold nothing of the probe's session open. Call guards from no
# redirection of the caller's (secn's `2>&1` included): a shell keeps a copy of each descriptor a
# redirection replaced (fd 10 and up), which its children would inherit.
vp_alone() {
	exec 2>&1
	"$@"
}

# vp_guard CMD...: CMD in a child nobody waits for; what it writes passes through a cat that ends
# at EOF or at its timeout. Then a frame line says so (the section open then is the one that did
# not answer), and the probe's end kills what it left behind (VP_LEFT).
vp_guard() {
	{ vp_reaped vp_alone "$@"; } | vp_bounded "$VP_FILE_T" cat
	vp_rc=$?
	case $vp_rc in
	124 | 137)
		printf '\n@@%s@@ abandoned %s\n' "$VP_B" "$VP_FILE_T"
		VP_LEFT=1
		;;
	esac
	return 0
}

# vp_guard_for SECONDS CMD...: vp_guard with a bound of its own, for a section that reads more than a
# stat's worth in the child (the dumps, py-spy, the kernel log's fallback).
vp_guard_for() {
	vp_gsave=$VP_FILE_T
	VP_FILE_T=$1
	shift
	vp_guard "$@"
	VP_FILE_T=$vp_gsave
}

# vp_fuse_count DEV: sets vp_fw to the requests waiting for the server of FUSE connection DEV
# (major:minor), from fusectl; empty where fusectl is not mounted. Builtins only.
vp_fuse_count() {
	vp_maj=${1%%:*}
	vp_min=${1#*:}
	read -r vp_fw </sys/fs/fuse/connections/$(((vp_maj << 20) | vp_min))/waiting 2>/dev/null || vp_fw=
}

# vp_fuse_waiting PATH: sets vp_fw to the requests waiting on the FUSE mount PATH is on (by its
# name: the longest mount point that is a prefix of it), and vp_fm to that mount point; vp_fw is
# empty for a path on no FUSE mount, or when fusectl is not mounted. Builtins only.
vp_fuse_waiting() {
	vp_fw=
	vp_fm=
	vp_best=-1
	vp_fdev=
	while read -r vp_a vp_b vp_dev vp_root vp_mp vp_rest; do
		case $vp_mp in
		/) ;;
		*) case $1/ in "$vp_mp"/*) ;; *) continue ;; esac ;;
		esac
		[ "${#vp_mp}" -gt "$vp_best" ] || continue
		vp_best=${#vp_mp}
		vp_fm=$vp_mp
		case $vp_rest in *" - fuse"*) vp_fdev=$vp_dev ;; *) vp_fdev= ;; esac
	done </proc/self/mountinfo
	[ -z "$vp_fdev" ] || vp_fuse_count "$vp_fdev"
}

# vp_fuse_under DIR: sets vp_fwl to the FUSE mounts at or under DIR with requests waiting, one
# "WAITING MOUNT" a line (empty: none, or no fusectl). Builtins only. A match of a glob that is such a
# mount, or under one, is not touched (stat of the mount point asks its server: a `/tmp/*` listing
# left a probe child in D state each run; found by a helper).
vp_fuse_under() {
	vp_fwl=
	while read -r vp_a vp_b vp_dev vp_root vp_mp vp_rest; do
		case $vp_rest in *" - fuse"*) ;; *) continue ;; esac
		case $vp_mp/ in "${1%/}"/*) ;; *) continue ;; esac
		vp_fuse_count "$vp_dev"
		[ -n "$vp_fw" ] && [ "$vp_fw" != 0 ] || continue
		vp_fwl="$vp_fwl$vp_fw $vp_mp$VP_NL"
	done </proc/self/mountinfo
}

# vp_on_listed PATH: true when PATH is one of vp_fwl's mounts or under one; sets vp_fw and vp_fm.
vp_on_listed() {
	vp_ifs=$IFS
	IFS=$VP_NL
	set -f
	set -- $vp_fwl "$1"
	set +f
	IFS=$vp_ifs
	vp_olp=
	for vp_ol; do vp_olp=$vp_ol; done
	while [ "$#" -gt 1 ]; do
		vp_fw=${1%% *}
		vp_fm=${1#* }
		shift
		case $vp_olp/ in "$vp_fm"/*) return 0 ;; esac
	done
	return 1
}

# vp_untouchable PATH: true (and says why) when PATH is on a FUSE mount with requests waiting.
vp_untouchable() {
	case $1 in /*) vp_fuse_waiting "$1" ;; *) vp_fuse_waiting "$PWD/$1" ;; esac
	[ -n "$vp_fw" ] && [ "$vp_fw" != 0 ] || return 1
	printf '@@fuse-waiting %s %s\n' "$vp_fw" "$vp_fm"
}

# vp_untouchable_link LINK: true (and says why) when the symbolic link LINK leads onto a FUSE mount
# with requests waiting; its target read with readlink, which never enters it.
vp_untouchable_link() {
	vp_lt=$(readlink -- "$1" 2>/dev/null) || return 1
	case $vp_lt in /*) ;; *) vp_lt=${1%/*}/$vp_lt ;; esac
	vp_untouchable "$vp_lt"
}

# vp_through_untouchable PATH: true (and says why) when a symbolic link among PATH's components
# leads onto a FUSE mount with requests waiting (a --log's directory given through a link: df went in).
vp_through_untouchable() {
	case $1 in /*) vp_acc= ;; *) vp_acc=. ;; esac
	vp_by_component vp_through_of "$1"
}
vp_through_of() {
	for vp_c; do
		[ -n "$vp_c" ] || continue
		vp_acc=$vp_acc/$vp_c
		[ -h "$vp_acc" ] || continue
		vp_untouchable_link "$vp_acc" && return 0
	done
	return 1
}

# vp_by_component FUNC PATH: FUNC run with PATH's components as its arguments (split on `/`, no
# wildcard expanded: a component `*` is a name), its status returned.
vp_by_component() {
	vp_bf=$1
	vp_ifs=$IFS
	IFS=/
	set -f
	set -- $2
	set +f
	IFS=$vp_ifs
	"$vp_bf" "$@"
}

# vp_logpath PATH: sets vp_real to the file a --log names, resolved on the target, or says why it
# is not touched (@@refused WHY, @@fuse-waiting) and fails. Refused: a symbolic link to a file its
# owner does not own (a link the tenant planted to /etc/shadow): never another file's content, nor
# its size, in a report. vp_kernel is set for a file under /proc, /sys or /dev: stat'ed, never
# read (a link to /proc/kmsg would consume the kernel's messages). A plain file costs no fork; a
# link costs readlink and stat.
# vp_dirlinks DIR: true when every symbolic link among DIR's components is root's, or its owner's
# leading to its owner's directory, and no component is `..`; else says which is not (@@refused)
# and fails. Only the last
# component of a --log was checked: `tenant/run -> /root-only/dir` read the root-only file
# through it. A component that is no link costs a builtin test; a link, one stat.
vp_dirlinks() {
	vp_tlinks=
	case $1 in /*) vp_acc= ;; *) vp_acc=. ;; esac
	vp_by_component vp_dirlinks_of "$1"
}
vp_dirlinks_of() {
	for vp_c; do
		[ -n "$vp_c" ] || continue
		if [ "$vp_c" = .. ]; then
			# `link/..` is the physical parent of where the link leads, not the link's own directory
			printf '@@refused a path with a .. component: %s\n' "$vp_acc/.."
			return 1
		fi
		vp_acc=$vp_acc/$vp_c
		[ -h "$vp_acc" ] || continue
		# where the link leads, read from the link alone, before any stat goes through it: a link into
		# a FUSE mount with requests waiting is not touched (the stat below hung on one, and left two
		# processes in D state for good; found by a helper)
		vp_untouchable_link "$vp_acc" && return 1
		vp_lo=$(stat -c '%u' -- "$vp_acc" "$vp_acc/" 2>/dev/null)
		set -- $vp_lo
		if [ "$#" != 2 ] || { [ "$1" != 0 ] && [ "$1" != "$2" ]; }; then
			printf '@@refused a directory link to another user'"'"'s directory (uid %s; the link is uid %s'"'"'s): %s\n' \
				"${2:-?}" "${1:-?}" "$vp_acc"
			return 1
		fi
		[ "$1" = 0 ] || vp_tlinks=1
	done
	return 0
}

# vp_swappable DIR: sets vp_tlinks (the read then enters DIR one component at a time, vp_enter)
# when a user not root could put a link in place of one of DIR's directories: one of them is not
# root's, or is writable by others without the sticky bit. A tenant's directory that was one at
# the check and its link to a root-only one at the read (renameat2's exchange) put the root-only
# file in 4 of 20 reports. One stat for the whole path, once a run for each log read.
vp_swappable() {
	case $1 in /*) vp_acc= ;; *) vp_acc=. ;; esac
	vp_by_component vp_swappable_of "$1"
}
vp_swappable_of() {
	vp_swn=$#
	for vp_c; do
		[ -n "$vp_c" ] || continue
		vp_acc=$vp_acc/$vp_c
		set -- "$@" "$vp_acc"
	done
	shift "$vp_swn"
	[ "$#" -gt 0 ] || return 0
	set -- $(stat -L -c '%u %a' -- "$@" 2>/dev/null)
	while [ "$#" -ge 2 ]; do
		case $2 in *[!0-7]*) vp_tlinks=1 ;; esac
		[ "$1" = 0 ] && [ -z "$vp_tlinks" ] && [ $((0$2 & 01000)) != 0 -o $((0$2 & 022)) = 0 ] || vp_tlinks=1
		shift 2
	done
}

# vp_enter DIR: cd into DIR, a checked path's directory as given. Where it goes through a link not
# root's (vp_dirlinks set vp_tlinks), one component at a time, each checked once it is the current
# directory: a component that was a directory must still be that directory (same
# device and inode), one that is a link must lead to its owner's directory. A tenant renaming its
# link between the check and the read (its own directory, then a root-only one) put the root-only
# file in 3 of 20 reports. Two stats a component, and only on such paths.
vp_enter() {
	if [ -z "$vp_tlinks" ]; then
		cd -P -- "${1:-/}" 2>/dev/null
		return
	fi
	case $1 in /*) cd / 2>/dev/null || return 1 ;; esac
	vp_by_component vp_enter_of "$1"
}
vp_enter_of() {
	for vp_c; do
		[ -n "$vp_c" ] && [ "$vp_c" != . ] || continue
		vp_pre=$(stat -c '%d:%i %u %F' -- "$vp_c" 2>/dev/null)
		cd -P -- "$vp_c" 2>/dev/null || return 1
		vp_post=$(stat -c '%d:%i %u' . 2>/dev/null)
		case $vp_pre in
		"${vp_post%% *} "*" directory") continue ;;
		*" 0 symbolic link") continue ;;
		*" symbolic link")
			vp_lo=${vp_pre#* }
			[ -n "$vp_post" ] && [ "${vp_lo%% *}" = "${vp_post#* }" ] && continue
			;;
		esac
		printf '@@refused a directory changed while it was read (a link renamed in?): %s\n' "$vp_c"
		return 1
	done
	return 0
}

vp_logpath() {
	vp_kernel=
	vp_untouchable "$1" && return 1
	case $1 in */*) vp_dirlinks "${1%/*}" || return 1 ;; esac
	vp_real=$1
	case $1 in
	*/*) vp_ldir=${1%/*} vp_lbase=${1##*/} ;;
	*) vp_ldir=. vp_lbase=$1 ;;
	esac
	vp_home=$PWD
	cd -P -- "${vp_ldir:-/}" 2>/dev/null || return 0
	vp_real=${PWD%/}/$vp_lbase
	vp_lown=
	if [ -h "$vp_lbase" ]; then
		if vp_untouchable_link "./$vp_lbase"; then
			cd "$vp_home" 2>/dev/null
			return 1
		fi
		vp_real=$(readlink -f -- "$vp_lbase" 2>/dev/null)
		[ -n "$vp_real" ] || vp_real=${PWD%/}/$vp_lbase
		# the link's owner and the owner of the file it leads to
		vp_lown=$(stat -c '%u' -- "$vp_lbase" "$vp_real" 2>/dev/null)
	fi
	cd "$vp_home" 2>/dev/null
	case $vp_real/ in /proc/* | /sys/* | /dev/*) vp_kernel=1 ;; esac
	[ -n "$vp_lown" ] || return 0
	set -- $vp_lown
	if [ "$#" = 2 ] && [ "$1" != "$2" ]; then
		printf '@@refused a link to a file of another user (uid %s; the link is uid %s'"'"'s): %s\n' "$2" "$1" "$vp_real"
		return 1
	fi
	vp_untouchable "$vp_real" && return 1
	return 0
}

# logstat N PATH: "<size> <mtime> <inode> <type>" of the file PATH leads to, or the reason it is
# not (or cannot be) stat'ed.
vp_logstats_sec() {
	printf '\n@@%s@@ %s\n' "$VP_B" "$1"
	[ "$VP_NLOGS" = 0 ] || vp_guard vp_each_log vp_logstat_one
	printf '\n@@rc=0\n\n@@%s@@ /%s\n' "$VP_B" "$1"
}
vp_logstat_one() {
	printf '@@log %s\n' "$1"
	vp_logpath "$2" && stat -L -c '%s %Y %i %F' -- "$vp_real"
}
# Only a regular file is read: a FIFO or a device named by --log would block or never end.
vp_logtail() {
	vp_logpath "$1" || return 0
	if [ ! -f "$vp_real" ]; then
		printf '@@notregular\n'
		return 0
	fi
	if [ -n "$vp_kernel" ]; then
		printf '@@refused a kernel or device file: %s\n' "$vp_real"
		return 0
	fi
	[ -n "$vp_tlinks" ] || vp_swappable "$vp_ldir"
	# opened once, and read only if what is open is the file checked: a file swapped for a link
	# between the check and the read put another user's file in 10 of 30 reports. The read goes
	# through the open descriptor (/proc/self/fd/5 of the reader: the same open file, seekable).
	# Each line prefixed, so no line of the log can pass for one of the probe's own (format 3).
	# A plain file is opened from its directory, entered along the path as given and checked there
	# as the current one (vp_enter); a link is opened as resolved and checked (vp_logpath)
	(
		# a file this user may not read (another user's; root squashed on NFS) says so: a failed `exec`
		# redirection would end the subshell before any `||`
		if [ -z "$vp_tlinks" ] || [ -h "$vp_ldir/$vp_lbase" ]; then
			[ -r "$vp_real" ] || { printf '@@unreadable\n'; exit 0; }
			exec 5<"$vp_real" || exit 0
			vp_same "$vp_real" || exit 0
		else
			vp_enter "$vp_ldir" || exit 0
			[ -r "./$vp_lbase" ] || { printf '@@unreadable\n'; exit 0; }
			exec 5<"./$vp_lbase" || exit 0
			vp_same "./$vp_lbase" || exit 0
		fi
		tail -c "$VP_TAIL" /proc/self/fd/5 | awk '{ print "|" $0 }'
	) 2>/dev/null
}

# vp_same PATH: true when descriptor 5, just opened from PATH, is PATH itself (the same device and
# inode as PATH's own, not followed: a link swapped in is not); else says so (@@refused).
vp_same() {
	vp_o=$(stat -L -c '%d:%i' /proc/self/fd/5 2>/dev/null)
	vp_p=$(stat -c '%d:%i' -- "$1" 2>/dev/null)
	[ -n "$vp_o" ] && [ "$vp_o" = "$vp_p" ] && return 0
	printf '@@refused the file changed between its check and its read (a link swapped in?): %s\n' "$1"
	return 1
}

# Space, then inodes, of /tmp and the logs' directories; a directory on a FUSE mount with requests
# waiting is left out (and said). Run in the guarded files phase: a dead mount costs its timeout.
vp_df() { vp_dfdirs vp_df_on /tmp; }
vp_df_on() {
	for vp_d; do
		shift
		vp_untouchable "$vp_d" || vp_through_untouchable "$vp_d" || set -- "$@" "$vp_d"
	done
	[ "$#" -gt 0 ] || return 0
	df -P -- "$@"
	printf '@@inodes\n'
	df -P -i -- "$@"
}

# glob PATTERN: the first VP_MAXART matches as "<size> <mtime> <owner uid> <type>|<name>". The list is cut
# in the shell, so stat never sees the rest of a huge directory.
vp_glob() {
	# the directory the pattern starts from, by its name (the part before its first wildcard)
	vp_g=${1%%[[*?]*}
	case $vp_g in */*) vp_g=${vp_g%/*} ;; *) vp_g=. ;; esac
	vp_untouchable "${vp_g:-/}" && return 0
	vp_dirlinks "${vp_g:-/}" || return 0
	# a wildcard that matches directories (`/tmp/*/*`) can match a tenant's link to a root-only one:
	# each match's directories are checked as the fixed part's are
	vp_gdeep=
	case ${1#*[[*?]} in */*) vp_gdeep=1 ;; esac
	vp_gpat=$1
	vp_ifs=$IFS
	IFS=
	set -- $1
	IFS=$vp_ifs
	# no match leaves the pattern itself: a match is never touched to tell (a link into a dead mount)
	if [ "$#" = 1 ] && [ "$1" = "$vp_gpat" ] && [ ! -L "$1" ] && [ ! -e "$1" ]; then
		printf '@@nomatch\n'
		return 0
	fi
	printf '@@count %s\n' "$#"
	if [ "$#" -gt "$VP_MAXART" ]; then
		vp_gn=$#
		vp_i=0
		for vp_a; do
			[ "$vp_i" -lt "$VP_MAXART" ] || break
			vp_i=$((vp_i + 1))
			set -- "$@" "$vp_a"
		done
		shift "$vp_gn"
	fi
	# a name holding a newline would print as two lines: counted, not listed
	vp_gn=$#
	vp_nl=0
	vp_lk=0
	vp_fuse_under "${vp_g:-/}"
	for vp_a; do
		case $vp_a in
		*"$VP_NL"*) vp_nl=$((vp_nl + 1)) ;;
		*)
			if [ -n "$vp_fwl" ] && vp_on_listed "$vp_a"; then
				printf '@@fuse-waiting %s %s\n' "$vp_fw" "$vp_fm"
			elif [ -n "$vp_gdeep" ] && ! vp_dirlinks "${vp_a%/*}" >/dev/null; then
				vp_lk=$((vp_lk + 1))
			else
				set -- "$@" "$vp_a"
			fi
			;;
		esac
	done
	shift "$vp_gn"
	[ "$vp_nl" = 0 ] || printf '@@unlisted %s\n' "$vp_nl"
	[ "$vp_lk" = 0 ] || printf '@@refused %s match(es) through a directory link to another user'"'"'s directory, not listed\n' "$vp_lk"
	[ "$#" -gt 0 ] || return 0
	stat -c '%s %Y %u %F|%n' -- "$@"
}


# Whole seconds since boot, without a fork.
vp_secs() {
	vp_u=0
	read -r vp_u vp_i </proc/uptime 2>/dev/null
	vp_u=${vp_u%.*}
}

# nvidia-smi on a lost GPU blocks until its timeout: after one such call, skip the rest.
# Without nvidia-smi the section's function says so itself (and lists /dev/nvidia*), without a fork.
vp_gpu_sec() {
	if ! vp_has nvidia-smi; then
		secn "$1" "$2"
		return 0
	fi
	vp_secs
	vp_g0=$vp_u
	sec "$1" 65536 "$2"
	vp_secs
	if [ $((vp_u - vp_g0)) -ge $((VP_NVSMI_T - 1)) ]; then VP_GPU_HUNG=1; fi
}

# ---- the watchdog ----
# It ends the probe at its deadline (which comes before the client gives up), and within a second
# when the probe's shell is gone: killed, or left behind by a closed session (sshd exits, and the
# shell is adopted by another parent). The deadline is one `sleep` in a child of its own, whose end
# arrives as SIGUSR2. While the client holds the probe's stdin open (vastprobe's transports do, until
# they have read the output), the watchdog blocks reading it, with no fork: its end-of-file is the
# client gone, or the session closed. Only then, or for a client that closed stdin after the script
# (`ssh HOST sh -s < probe.sh`), does it tick with `sleep 0.5` (two forks a second; GNU and BusyBox
# sleep take fractions, as the sample's sleep does) and look at the shell. It ignores SIGPIPE (a
# closed channel must not end it before it kills), SIGHUP, SIGINT and SIGTERM, kills first and
# reports after. What it kills: every process
# of the probe's session (the shell leads it under sshd and under vastprobe's local run; commands
# `timeout` put in process groups of their own stay in it), else of its process group, found by
# reading /proc/*/stat with builtins; a process in D state on a dead mount cannot be killed by
# anyone. Where /proc is not this shell's PID namespace's, PIDs read there are not ours to kill:
# then it reports and kills its process group, as kill(0) reaches it.

# The shell's own line in /proc: its PID there, its parent, and what a kill may take in.
vp_whoami() {
	VP_SELF=
	VP_PARENT=
	VP_KF=
	VP_KID=
	vp_l=
	read -r vp_l </proc/self/stat 2>/dev/null || return 0
	VP_SELF=${vp_l%% *}
	set -- ${vp_l##*') '}
	VP_PARENT=$2
	[ "$VP_SELF" = "$$" ] || return 0
	if [ "$4" = "$VP_SELF" ]; then
		VP_KF=4 VP_KID=$4
	elif [ "$3" = "$VP_SELF" ]; then
		VP_KF=3 VP_KID=$3
	fi
}

# vp_killall: SIGKILL to every process of the probe's session (or group) but this one.
vp_killall() {
	for vp_p in /proc/[0-9]*; do
		vp_p=${vp_p#/proc/}
		[ "$vp_p" != "$vp_me" ] || continue
		vp_l=
		read -r vp_l <"/proc/$vp_p/stat" 2>/dev/null || continue
		set -- ${vp_l##*') '}
		if [ "$VP_KF" = 4 ]; then vp_k=${4:-}; else vp_k=${3:-}; fi
		[ "$vp_k" != "$VP_KID" ] || kill -KILL "$vp_p" 2>/dev/null
	done
}

vp_watch() {
	trap '' PIPE HUP INT TERM
	vp_me=
	read -r vp_me vp_x </proc/self/stat 2>/dev/null
	vp_why=
	vp_tick=
	vp_dl=
	# USR1 is the probe's end: take the deadline's sleeper and the tick's sleep along and reap them
	# (`$!`, even one forked just before the trap ran), or they outlive us, adopted by the target's
	# init, where the next probe reads them as children of the job (a PID 1 entrypoint that waits on
	# children).
	trap 'vp_reap; exit 0' USR1
	trap 'vp_why=deadline; vp_end' USR2
	if [ "$VP_DEADLINE" -gt 0 ]; then
		# TERM (from vp_reap) takes its sleep along; the sleep's own end is the deadline
		(
			trap 'kill -KILL $vp_s 2>/dev/null; wait $vp_s; exit 0' TERM
			sleep "$VP_DEADLINE" &
			vp_s=$!
			wait $vp_s && kill -USR2 "$vp_me" 2>/dev/null
		) </dev/null >/dev/null 2>&1 &
		vp_dl=$!
	fi
	# the client's stdin (fd 7): nothing comes on it, and its end is the client gone
	while read -r vp_x <&7; do :; done 2>/dev/null
	vp_tick=1
	while [ -z "$vp_why" ]; do
		sleep 0.5 </dev/null >/dev/null 2>&1 & # it must not hold the probe's stdout open after the end
		wait $! # returns at once on a signal
		if [ -n "$VP_SELF" ]; then
			vp_l=
			if read -r vp_l <"/proc/$VP_SELF/stat" 2>/dev/null; then
				set -- ${vp_l##*') '}
				if [ "${1:-}" = Z ] || [ "${2:-}" != "$VP_PARENT" ]; then vp_why=gone; fi
			else
				vp_why=gone
			fi
		fi
	done
	vp_end
}

# The watchdog's children, ended and reaped: the deadline's sleeper (TERM: it kills its sleep) and a tick.
vp_reap() {
	if [ -n "$vp_tick" ]; then
		kill -KILL $! 2>/dev/null
		wait $! 2>/dev/null
	fi
	if [ -n "$vp_dl" ]; then
		kill -TERM "$vp_dl" 2>/dev/null
		wait "$vp_dl" 2>/dev/null
	fi
}

# The probe's deadline, or its shell gone: everything of the probe's session killed.
vp_end() {
	vp_reap
	if [ -z "$VP_KF" ]; then
		[ "$vp_why" != deadline ] || printf '\n@@%s@@ deadline\n' "$VP_B"
		kill -KILL 0 2>/dev/null
		exit 0
	fi
	vp_killall
	vp_killall # what forked while the first pass ran
	[ "$vp_why" != deadline ] || printf '\n@@%s@@ deadline\n' "$VP_B"
	exit 0
}

vp_main() {
	VP_LEFT=
	vp_whoami
	vp_watch &
	vp_wd=$!
	secn meta vp_meta
	secn host vp_host
	secn s0.now vp_now
	vp_lists # reads every stat: the first sample starts here
	vp_s0
	secn syscall vp_syscall
	vp_gpu_sec s0.gpu vp_gpu
	vp_logstats_sec s0.logs
	vp_sl=
	if [ "$VP_SAMPLE" != 0 ]; then
		sleep "$VP_SAMPLE" &
		vp_sl=$!
	fi
	secn cmdline vp_cmdline
	secn env vp_env
	vp_fr_sec
	[ "$VP_PYSPY" != 1 ] || vp_pystack_sec
	vp_fd
	vp_held_sec
	vp_k=$(vp_kmsg)
	secn kmsg printf '%s\n' "$vp_k"
	case $vp_k in
	# unreadable, empty, or killed by its timeout (exit 124, 137): the journal or kern.log may answer
	*"@@err "* | *"@@lines 0" | *"@@exit 1"[2-9][0-9]*) vp_kmsg_fallback_sec ;;
	*"Killed process"*) ;;
	# a memory cgroup counts an OOM kill that dmesg no longer holds (a busy host rolled its ring
	# buffer over): the journal's kernel messages may
	*) [ "$VP_OOMC" != 1 ] || vp_kmsg_fallback_sec ;;
	esac
	vp_gpu_sec gpuapps vp_gpuapps
	vp_guard vp_files
	if [ -n "$vp_sl" ]; then
		wait "$vp_sl"
		secn s1.now vp_now
		secn s1.proc vp_s1
		vp_gpu_sec s1.gpu vp_gpu
		vp_logstats_sec s1.logs
	fi
	# times must run in this shell, not in a section's subshell, to count the whole probe.
	printf '\n@@%s@@ times\n' "$VP_B"
	times
	printf '\n@@rc=0\n\n@@%s@@ /times\n' "$VP_B"
	kill -USR1 "$vp_wd" 2>/dev/null && wait "$vp_wd"
	if [ -n "$VP_LEFT" ] && [ -n "$VP_KF" ]; then # what a guard abandoned, if any signal can end it
		vp_me=$VP_SELF
		vp_killall
	fi
	printf '\n@@%s@@ end\n' "$VP_B"
}

# The files phase, in one guarded child: the --log tails, df, the --artifacts listings.
vp_files() {
	vp_each_log vp_logtail_sec
	secn df vp_df
	vp_each_glob vp_glob_sec
}
vp_logtail_sec() { secn "log.$1" vp_logtail "$2"; }
vp_glob_sec() { secn "art.$1" vp_glob "$2"; }

# fd 7: the client's stdin, for the watchdog; `exit` on the same line: the shell reads no further
# script from a stdin the client still holds open
vp_main 7<&0 </dev/null; exit
