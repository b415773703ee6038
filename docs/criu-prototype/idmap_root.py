# Prototype (CRIU checkpoint of a jail): see the commit message.
# Attaches an idmapped clone of SRC at DST, mapped like the jail's user namespace (0 -> BASE, COUNT ids).
import ctypes, os, sys, subprocess, struct
src, dst, base, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
holder = subprocess.Popen(["unshare", "-U", "sleep", "30"])
import time; time.sleep(0.2)
for f in ("uid_map", "gid_map"):
    open(f"/proc/{holder.pid}/{f}", "w").write(f"0 {base} {count}\n")
ns = os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY)
AT_FDCWD = -100
tree = libc.syscall(428, AT_FDCWD, src.encode(), 1 | 0o2000000)  # OPEN_TREE_CLONE|CLOEXEC
assert tree >= 0, os.strerror(ctypes.get_errno())
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x2, 0x4, 0x100000
attr = struct.pack("QQQQ", MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, 0, ns)
buf = ctypes.create_string_buffer(attr)
r = libc.syscall(442, tree, b"", 0x1000, buf, len(attr))  # AT_EMPTY_PATH
assert r == 0, os.strerror(ctypes.get_errno())
r = libc.syscall(429, tree, b"", AT_FDCWD, dst.encode(), 4)  # MOVE_MOUNT_F_EMPTY_PATH
assert r == 0, os.strerror(ctypes.get_errno())
holder.kill()
