#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Test "internet" servers for test_attack_secrets (run inside the test's
# internet namespace only):
#   TLS recorder on every --tls ADDR:PORT: answers the first request head
#     with 200 and records every decrypted byte of the connection to
#     OUT/conn-<addr>-<n>.bin once it ends (1.5 s idle or EOF);
#   relay on --relay ADDR:PORT=TO_ADDR:TO_PORT: an on-path attacker that
#     forwards TCP both ways and logs the TLS records' types and lengths
#     in OUT/relay.log ("c2s type=<t> len=<n>", "s2c ...", "sni <name>");
#   silent on --silent ADDR:PORT: accepts and never speaks.
import os, socket, ssl, sys, threading, time

out, cert, key = sys.argv[1], sys.argv[2], sys.argv[3]
specs = sys.argv[4:]
lock = threading.Lock()
counter = [0]

def log(line):
    with lock:
        with open(os.path.join(out, "relay.log"), "a") as f:
            f.write(line + "\n")

def listen(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    return s

def tls_conn(ctx, c, addr):
    data = b""
    try:
        t = ctx.wrap_socket(c, server_side=True)
        t.settimeout(1.5)
        answered = False
        while True:
            try:
                b = t.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            data += b
            if not answered and b"\r\n\r\n" in data:
                answered = True
                t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nrecorded\n")
        try:
            t.close()
        except Exception:
            pass
    except Exception as e:
        data += ("\n#error %r\n" % e).encode()
    with lock:
        counter[0] += 1
        n = counter[0]
    p = os.path.join(out, "conn-%s-%d.bin" % (addr, n))
    with open(p + ".tmp", "wb") as f:
        f.write(data)
    os.rename(p + ".tmp", p)

def tls_server(addr, port):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s = listen(addr, port)
    while True:
        c, _ = s.accept()
        threading.Thread(target=tls_conn, args=(ctx, c, addr), daemon=True).start()

def records(tag, buf):
    # Logs the complete TLS records at the start of buf; returns the rest.
    while len(buf) >= 5:
        n = int.from_bytes(buf[3:5], "big")
        if len(buf) < 5 + n:
            break
        rec = buf[:5 + n]
        if rec[0] == 22 and tag == "c2s" and rec[5] == 1:
            i = rec.find(b"api.test")
            log("sni %s" % ("api.test" if i >= 0 else "?"))
        log("%s type=%d len=%d" % (tag, rec[0], n))
        buf = buf[5 + n:]
    return buf

def pump(a, b, tag):
    buf = b""
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            buf = records(tag, buf + d)
            b.sendall(d)
    except Exception:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except Exception:
        pass

def relay_server(addr, port, to):
    s = listen(addr, port)
    while True:
        c, _ = s.accept()
        log("accept")
        u = socket.create_connection(to)
        threading.Thread(target=pump, args=(c, u, "c2s"), daemon=True).start()
        threading.Thread(target=pump, args=(u, c, "s2c"), daemon=True).start()

held = []
def silent_server(addr, port):
    s = listen(addr, port)
    while True:
        c, _ = s.accept()
        held.append(c)
        log("silent accept")

threads = []
for sp in specs:
    kind, rest = sp.split("=", 1)
    if kind == "tls":
        a, p = rest.rsplit(":", 1)
        threads.append(threading.Thread(target=tls_server, args=(a, int(p)), daemon=True))
    elif kind == "relay":
        frm, to = rest.split(">")
        a, p = frm.rsplit(":", 1)
        ta, tp = to.rsplit(":", 1)
        threads.append(threading.Thread(target=relay_server, args=(a, int(p), (ta, int(tp))), daemon=True))
    elif kind == "silent":
        a, p = rest.rsplit(":", 1)
        threads.append(threading.Thread(target=silent_server, args=(a, int(p)), daemon=True))
for t in threads:
    t.start()
open(os.path.join(out, "ready"), "w").close()
while True:
    time.sleep(3600)
