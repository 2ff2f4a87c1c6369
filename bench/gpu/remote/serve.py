"""gslice-remoted for the remote GPU suites (bench/gpu/suites/remote_*.sh): one server on this
machine serving a unix socket and loopback TCP (port picked by the server), and its end."""
import os, re, signal, subprocess, time


def start(remoted, env, sock, log_path, timeout_s=20):
    """Starts gslice-remoted in a session of its own; returns (process, tcp address), the
    address None when it did not listen on both within timeout_s (see log_path)."""
    server = subprocess.Popen([remoted, "--listen", "unix:" + sock, "--listen", "tcp://127.0.0.1:0", "--allow-root-tenant"], env=env,
                              stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    tcp = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (tcp is None or not os.path.exists(sock)):
        m = re.search(r"listening on (tcp://127\.0\.0\.1:\d+)", open(log_path).read())
        tcp = m.group(1) if m else None
        time.sleep(0.05)
    return server, (tcp if os.path.exists(sock) else None)


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
