#!/usr/bin/env python3
"""Guest CPU per call, by process and by system call, from `nfsbench lab --profile`.

    guest-profile.py PROFILE_DIR [PHASE ...]     (default phases: create stat open remove)

PROFILE_DIR is the `<stem>-profile/` directory `nfsbench lab --profile` leaves next to
its report: perf-meta-<server>-<phase>.data (perf record -a -g -F 499 in the guest,
around one fs-meta phase), the guest's kallsyms, and lab-*.json is looked up one level
up for the number of NFS calls of each profiled phase (its `metadata.profiled_runs`). Each sample of a vCPU is charged to a group:

  client   fs-meta (the kernel NFS client runs in its context) and the client's
           rpciod/xprtiod kworkers
  server   knfsd's threads and its workqueue, or our nfsd's threads
  idle     the idle task
  other    the rest (the shell, perf itself, ...)

and a server sample to what it was doing: `user <object>` in user space, the system
call it was in (the frame below do_syscall_64), or `kernel (no syscall)` (a kernel
thread, an interrupt taken in user space). Printed: milliseconds of guest CPU per NFS
call (samples x 1/499 s / calls). perf's cpu-clock samples in a TCG guest are a
sampled estimate (a halted vCPU is sampled less often than a busy one, so `idle`
undercounts); what is compared is the busy groups, in the same run.
"""
import collections
import json
import pathlib
import re
import subprocess
import sys

HZ = 499
SERVER_COMMS = ("nfsd", "tokio-rt-worker", "nfsd-rdma", "tokio-runtime-w")


def group(comm):
    if comm == "swapper":
        return "idle"
    if comm == "fs-meta" or comm.startswith("kworker/") and comm.endswith(("-xp", "-rp", "rpciod", "xprtiod")):
        return "client"
    if comm in SERVER_COMMS or comm.startswith("kworker/") and comm.endswith("-nf"):
        return "server"
    return "other"


def syscall_name(frame):
    for p in ("__x64_sys_", "__do_sys_", "__se_sys_", "ksys_", "__sys_", "do_sys_", "do_"):
        if frame.startswith(p):
            return frame[len(p):]
    return frame


def samples(data, kallsyms):
    """Yields (comm, frames) per sample; frames leaf first, as 'symbol (object)'."""
    out = subprocess.run(
        ["perf", "script", "-i", str(data), "--kallsyms", str(kallsyms), "-F", "comm,tid,ip,sym,dso"],
        capture_output=True, text=True, check=True).stdout
    comm, frames = None, []
    for line in out.splitlines():
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
        elif not line[0].isspace():
            # "comm tid": the comm may hold spaces, the tid does not.
            comm, frames = line.rsplit(None, 1)[0].strip(), []
        else:
            m = re.match(r"\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$", line)
            if m:
                frames.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if comm is not None:
        yield comm, frames


def activity(frames):
    if not frames:
        return "unknown"
    ip, sym, dso = frames[0]
    if ip < 0xffff800000000000:
        return "user " + pathlib.Path(dso).name
    names = [f[1] for f in frames]
    if "do_syscall_64" in names:
        i = names.index("do_syscall_64")
        return "syscall " + (syscall_name(names[i - 1]) if i > 0 else "entry")
    return "kernel (no syscall)"


def calls_of(profile_dir, server, phase):
    for j in sorted(profile_dir.parent.glob("lab*.json")):
        r = json.loads(j.read_text())
        meta = r.get("lab", {}).get("metadata") or {}
        for p in meta.get("profiled_runs", []):
            if p.get("server") == server and p.get("phase") == phase:
                return p["calls"]
    return None


def main():
    d = pathlib.Path(sys.argv[1])
    phases = sys.argv[2:] or ["create", "stat", "open", "remove"]
    kallsyms = d / "kallsyms"
    for phase in phases:
        rows = {}
        for server in ("knfsd", "ours"):
            data = d / f"perf-meta-{server}-{phase}.data"
            if not data.exists():
                continue
            by_group = collections.Counter()
            by_act = collections.Counter()
            for comm, frames in samples(data, kallsyms):
                g = group(comm)
                by_group[g] += 1
                if g == "server":
                    by_act[activity(frames)] += 1
            rows[server] = (by_group, by_act, calls_of(d, server, phase))
        print(f"== phase {phase}: guest CPU per NFS call, ms (samples at {HZ} Hz / calls)")
        for server, (by_group, by_act, calls) in rows.items():
            if not calls:
                print(f"{server}: number of calls unknown (no lab*.json next to {d})")
                continue
            ms = lambda n: 1000.0 * n / HZ / calls
            busy = sum(v for k, v in by_group.items() if k != "idle")
            print(f"{server}: {calls} calls; busy {ms(busy):.3f} = client {ms(by_group['client']):.3f}"
                  f" + server {ms(by_group['server']):.3f} + other {ms(by_group['other']):.3f}")
            for act, n in by_act.most_common():
                if ms(n) >= 0.005:
                    print(f"    {act:40s} {ms(n):.3f}")
        print()


if __name__ == "__main__":
    main()
