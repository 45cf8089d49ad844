#!/usr/bin/env python3
"""Hostile NATS publisher: raw protocol HPUB with chosen headers.
usage: pub.py SUBJECT ID PAYLOAD [ID PAYLOAD ...]   (ID '-' = no Nats-Msg-Id)
env: NATS_PORT (4297), WAITACK=1 to use a reply inbox and print PubAcks."""
import os, socket, sys
port = int(os.environ.get("NATS_PORT", "4297"))
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"protocol":1}\r\nSUB _ack.> 1\r\n')
subj = sys.argv[1].encode()
args = sys.argv[2:]
n = 0
for i in range(0, len(args), 2):
    mid, payload = args[i], args[i+1]
    if payload.startswith("@"):
        payload = open(payload[1:], "rb").read()
    else:
        payload = payload.encode()
    hdr = b"NATS/1.0\r\n"
    if mid != "-":
        hdr += b"Nats-Msg-Id: " + mid.encode() + b"\r\n"
    hdr += b"\r\n"
    n += 1
    s.sendall(b"HPUB %s _ack.%d %d %d\r\n%s%s\r\n" % (subj, n, len(hdr), len(hdr) + len(payload), hdr, payload))
s.sendall(b"PING\r\n")
got = 0
while got < n:
    line = f.readline()
    if line.startswith(b"MSG") or line.startswith(b"HMSG"):
        parts = line.split()
        size = int(parts[-1])
        body = f.read(size + 2)
        got += 1
        if os.environ.get("WAITACK"):
            print(body.strip().decode(errors="replace")[-200:])
    elif line.startswith(b"-ERR"):
        print(line); break
s.close()
