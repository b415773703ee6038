#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A raw HTTPS client for test_attack_secrets, run in a sandbox's network
# namespace: client.py ADDR PORT SNI PAYLOAD_FILE OUT_FILE [tls12]
# Sends the payload's bytes as they are (a "\0SPLIT\0" marks a pause and a
# new write), then records everything the gateway answers until it closes
# (or 4 s of silence). The certificate is not checked (the sandbox trusts
# its own CA anyway; what matters here is what crosses the gateway).
import socket, ssl, sys, time

addr, port, sni, payload, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
if len(sys.argv) > 6 and sys.argv[6] == "tls12":
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
resp = b""

def resolve(name):
    # The gateway pins the addresses it answered for a name to the sandbox:
    # ask it (any UDP 53 from a sandbox is redirected to it).
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00\x00\x01\x00\x01"
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    try:
        u.sendto(q, ("10.213.253.53", 53))
        u.recv(512)
    except Exception:
        pass

if "." in sni and not (len(sys.argv) > 7 and sys.argv[7] == "nodns"):
    resolve(sni)
try:
    s = socket.create_connection((addr, port), timeout=10)
    t = ctx.wrap_socket(s, server_hostname=sni)
    data = open(payload, "rb").read()
    parts = data.split(b"\0SPLIT\0")
    for i, p in enumerate(parts):
        if i:
            time.sleep(0.3)
        if p:
            t.sendall(p)
    t.settimeout(4)
    while True:
        try:
            b = t.recv(65536)
        except socket.timeout:
            break
        except ssl.SSLError:
            break
        if not b:
            break
        resp += b
except Exception as e:
    resp += ("#client error %r" % e).encode()
open(out, "wb").write(resp)
