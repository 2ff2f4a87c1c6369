"""GPU workloads the suspend suite suspends and resumes (see suite.py).

  worker.py train --steps N --seed S --ballast-gib G   deterministic training loop; prints
                                                       "STEP i LOSS <repr>" after every step
  worker.py hold --gib G --go FILE                     holds G GiB of known data, prints READY,
                                                       waits for FILE, verifies, prints VERIFY
  worker.py sleeper --gib G --go FILE                  like hold, then times its first CUDA call
                                                       after FILE appears (FIRST_CALL_S <s>)
  worker.py alloc --gib G --go FILE                    allocates G GiB once (ALLOC ok|oom <s>),
                                                       waits for FILE
"""
import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


def say(*parts):
    print(*parts, flush=True)


def train(args):
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    ballast = None
    if args.ballast_gib > 0:
        ballast = torch.ones(int(args.ballast_gib * (1 << 30)) // 4, device=dev)
    width = args.width
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    x = torch.randn(args.batch, width, device=dev, generator=gen)
    y = torch.randint(0, 10, (args.batch,), device=dev, generator=gen)
    say("READY", os.getpid())
    t0 = time.monotonic()
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        # .item() synchronises: one line per finished step.
        say("STEP", step, "LOSS", repr(loss.item()), "T", f"{time.monotonic() - t0:.3f}")
    if ballast is not None:
        say("BALLAST", "ok" if bool(torch.all(ballast == 1).item()) else "bad")
    say("DONE")


def fill(gib, seed):
    n = int(gib * (1 << 30)) // 8 * 2  # even: summed as int64 pairs (no widening copy)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    t = torch.randint(-(1 << 31), (1 << 31) - 1, (n,), dtype=torch.int32, device="cuda",
                      generator=gen)
    return t, int(t.view(torch.int64).sum().item())


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)


def hold(args):
    t, checksum = fill(args.gib, 7)
    torch.cuda.synchronize()
    say("READY", os.getpid(), "CHECKSUM", checksum)
    wait_for(args.go)
    again = int(t.view(torch.int64).sum().item())
    say("VERIFY", "ok" if again == checksum else f"bad {again} != {checksum}")


def sleeper(args):
    t, checksum = fill(args.gib, 11)
    torch.cuda.synchronize()
    say("READY", os.getpid(), "CHECKSUM", checksum)
    wait_for(args.go)
    # The first CUDA call after the idle period: with gslice, the shim's gate catches it and
    # waits for a transparent resume; the program sees only the delay.
    t0 = time.monotonic()
    again = int(t.view(torch.int64).sum().item())
    first = time.monotonic() - t0
    t1 = time.monotonic()
    int(t.view(torch.int64).sum().item())
    second = time.monotonic() - t1
    say("FIRST_CALL_S", f"{first:.6f}", "SECOND_CALL_S", f"{second:.6f}")
    say("VERIFY", "ok" if again == checksum else f"bad {again} != {checksum}")


def alloc(args):
    torch.zeros(1, device="cuda")  # context first, so the timing below is the allocation
    t0 = time.monotonic()
    try:
        t = torch.empty(int(args.gib * (1 << 30)), dtype=torch.uint8, device="cuda")
        t.fill_(3)
        torch.cuda.synchronize()
        say("ALLOC", "ok", f"{time.monotonic() - t0:.3f}")
    except torch.OutOfMemoryError:
        say("ALLOC", "oom", f"{time.monotonic() - t0:.3f}")
    wait_for(args.go)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--ballast-gib", type=float, default=0)
    t.add_argument("--width", type=int, default=4096)
    t.add_argument("--batch", type=int, default=4096)
    for name in ("hold", "sleeper", "alloc"):
        h = sub.add_parser(name)
        h.add_argument("--gib", type=float, required=True)
        h.add_argument("--go", required=True)
    args = p.parse_args()
    {"train": train, "hold": hold, "sleeper": sleeper, "alloc": alloc}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
