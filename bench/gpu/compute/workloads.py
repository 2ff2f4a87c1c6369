"""Workloads of the compute suite: PyTorch models on random data, nothing downloaded.

Each builder returns a `step()` callable that does one unit of work on the GPU and
returns its output tensor (the loss for training) without synchronising; callers
synchronise, time, and check the last output is finite.

  matmul      compute-bound: eight 8192^3 bf16 matrix products per step
  resnet50    ResNet-50 training step (torchvision, weights=None), batch 64, 224x224, bf16 autocast
  bert-train  BERT-base-size encoder (nn.TransformerEncoder, d=768, 12 layers, 12 heads)
              training step, batch 16 x 256 tokens, bf16 autocast, AdamW
  bert-infer  the same encoder, inference: batch 8 x 128 tokens (one server request)
  host-spin   no GPU work: a Python loop on one host thread for 25 ms a step
"""

import time

import torch

D_MODEL, LAYERS, HEADS, FFN = 768, 12, 12, 3072
HOST_SPIN_STEP_S = 0.025


def _bert_encoder():
    layer = torch.nn.TransformerEncoderLayer(
        d_model=D_MODEL, nhead=HEADS, dim_feedforward=FFN, dropout=0.1,
        activation="gelu", batch_first=True, norm_first=False)
    return torch.nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=False)


def build(name, dev="cuda"):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if name == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        c = torch.empty_like(a)

        def step():
            for _ in range(8):
                torch.mm(a, b, out=c)
            return c
        return step

    if name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None).to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (64,), device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    if name == "bert-train":
        model = torch.nn.Sequential(_bert_encoder(), torch.nn.Linear(D_MODEL, D_MODEL)).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(16, 256, D_MODEL, device=dev)
        target = torch.randn(16, 256, D_MODEL, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), target)
            loss.backward()
            opt.step()
            return loss
        return step

    if name == "bert-infer":
        model = _bert_encoder().to(dev).eval()
        x = torch.randn(8, 128, D_MODEL, device=dev)

        def step():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x)
        return step

    if name == "host-spin":
        # One busy host thread and no GPU work: what another job's host loop costs a job bound
        # by its launches where the GPU is not shared at all (the CPUs' clocks, caches, memory).
        def step():
            end = time.perf_counter() + HOST_SPIN_STEP_S
            n = 0
            while time.perf_counter() < end:
                n += 1
            return torch.tensor(float(n))
        return step

    raise SystemExit(f"unknown workload {name!r}: matmul, resnet50, bert-train, bert-infer, host-spin")
