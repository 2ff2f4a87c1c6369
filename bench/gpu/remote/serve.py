"""gslice-remoted for the remote GPU suites (bench/gpu/suites/remote_*.sh): one server on this
machine serving a unix socket and loopback TCP (port picked by the server), and its end."""
import os, re, signal, subprocess, time


def start(remoted, env, sock, log_path, timeout_s=20, tcp=True, extra=("--allow-root-tenant",)):
    """Starts gslice-remoted in a session of its own, on the unix socket sock and, with tcp, on
    loopback TCP; extra: its further arguments (by default root clients get workers, as the
    suites run as root). Returns (process, address): the TCP address, or the socket's when
    not tcp; None when it did not listen on all within timeout_s (see log_path)."""
    argv = [remoted, "--listen", "unix:" + sock] + (["--listen", "tcp://127.0.0.1:0"] if tcp else []) + list(extra)
    server = subprocess.Popen(argv, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    address = None if tcp else "unix:" + sock
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (address is None or not os.path.exists(sock)) and server.poll() is None:
        if tcp:
            m = re.search(r"listening on (tcp://127\.0\.0\.1:\d+)", open(log_path).read())
            address = m.group(1) if m else None
        time.sleep(0.05)
    return server, (address if os.path.exists(sock) else None)


def stop(server, sock):
    """Ends the server and its session (its workers), then removes the socket."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.unlink(sock)
    except OSError:
        pass
