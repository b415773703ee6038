# Prototype (CRIU checkpoint of a jail): see the commit message.
# Opens what the restored tree inherits from the host and runs criu restore.
import os, socket, subprocess, sys
criu, D, R, DV, sock_path, fifo, agent, exe_key, null_key, fifo_key, sock_key = sys.argv[1:12]
extra = sys.argv[12:]
fds = {}
fds[exe_key] = os.open(agent, os.O_RDONLY)
fds[null_key] = os.open("/dev/null", os.O_RDWR)
fds[fifo_key] = os.open(fifo, os.O_RDWR)
try: os.unlink(sock_path)
except FileNotFoundError: pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sock_path); os.chmod(sock_path, 0o600); s.listen(64); s.setblocking(False)
fds[sock_key] = s.fileno()
args = [criu, "restore", "-D", D, "-d", "--root", R] + extra
for k, fd in fds.items():
    os.set_inheritable(fd, True)
    args += ["--inherit-fd", f"fd[{fd}]:{k}"]
sys.exit(subprocess.run(args, pass_fds=list(fds.values())).returncode)
