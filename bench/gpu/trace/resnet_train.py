"""ResNet-50 training steps for the timeline suite (bench/gpu/suites/trace.sh).

    python3 resnet_train.py --steps 40 --warmup 10 [--nvtx] [--batch 64]

Each step is one NVTX range "step" (torch.cuda.nvtx) holding "forward", "backward" and
"optimizer", and ends with a synchronisation inside it, so the GPU work of a step lies within
its range. Prints "imgs_per_s <x>" for the measured steps (after the warmup) on its last line.
Plain device allocations only; synthetic data.
"""
import argparse
import time

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--nvtx", action="store_true")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    nvtx = torch.cuda.nvtx

    def push(name):
        if a.nvtx:
            nvtx.range_push(name)

    def pop():
        if a.nvtx:
            nvtx.range_pop()

    def step():
        push("step")
        push("forward")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        pop()
        push("backward")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        pop()
        push("optimizer")
        opt.step()
        pop()
        torch.cuda.synchronize()
        pop()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t0
    print(f"imgs_per_s {a.steps * a.batch / dt:.2f}", flush=True)


if __name__ == "__main__":
    main()
