# Prototype (CRIU checkpoint of a jail): see the commit message.
# Prints --external options for files of the jail's tree on mounts outside its mount namespace.
import os, sys, glob
P = sys.argv[1]
mnts = {int(l.split()[0]) for l in open(f"/proc/{P}/mountinfo")}
out = {}
def add(path, what):
    try:
        fd = os.open(path, os.O_PATH)
    except OSError as e:
        return
    st = os.fstat(fd)
    mnt = int([l for l in open(f"/proc/self/fdinfo/{fd}") if l.startswith("mnt_id")][0].split()[1])
    os.close(fd)
    if mnt not in mnts:
        key = f"file[{mnt:x}:{st.st_ino:x}]"
        out.setdefault(key, []).append(what)
pids = [P] + [t for t in os.listdir("/proc") if t.isdigit() and open(f"/proc/{t}/stat").read().split(") ")[1].split()[1] == P]
for p in pids:
    add(f"/proc/{p}/exe", f"{p}:exe")
    for f in os.listdir(f"/proc/{p}/fd"):
        l = os.readlink(f"/proc/{p}/fd/{f}")
        if l.startswith(("socket:", "pipe:", "anon_inode:")):
            continue
        add(f"/proc/{p}/fd/{f}", f"{p}:fd{f}->{l}")
for k, v in out.items():
    print(k, " ".join(v), file=sys.stderr)
print(" ".join(f"--external {k}" for k in out))
