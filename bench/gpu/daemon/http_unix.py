"""GET a path from gsliced over its unix socket and print the body: http_unix.py SOCKET PATH"""
import socket
import sys

sock_path, path = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock_path)
s.sendall(f"GET {path} HTTP/1.1\r\nHost: gsliced\r\nConnection: close\r\n\r\n".encode())
data = b""
while chunk := s.recv(65536):
    data += chunk
head, _, body = data.partition(b"\r\n\r\n")
status = head.split(b"\r\n")[0].decode()
if " 200 " not in status + " ":
    print(status, file=sys.stderr)
    sys.exit(1)
sys.stdout.write(body.decode())
