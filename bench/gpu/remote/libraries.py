"""The CUDA libraries the frameworks load, one small workload each: what
bench/gpu/remote/library_tables.sh runs through the libcuda logger and
bench/gpu/suites/remote_libraries.sh runs locally and through the remote client.

    libraries.py list                     the checks' names, one a line
    libraries.py run NAME [OUT.npz]       run one check; its results (numpy arrays) into OUT.npz
    libraries.py compare NAME A.npz B.npz compare two runs' results as NAME says: bit for bit,
                                          or within its stated tolerance; prints one line

Each check is one process (a crash hides no other check). Inputs come from fixed seeds on the
host, so two runs on one GPU compute the same thing. `run` exits 0 when the workload ran, 3 when
the framework it needs is missing (printed as "SKIP ..."), anything else when it failed.
"""
import ctypes
import glob
import os
import sys

try:
    import numpy as np
except ImportError:  # `list` needs no numpy; `run` and `compare` say it is missing
    np = None

# name -> (workload, tolerance: None = bit for bit, else (rtol, atol), what it exercises)
CHECKS = {}


def check(name, tolerance=None, what=""):
    def add(fn):
        CHECKS[name] = (fn, tolerance, what)
        return fn
    return add


class Skip(Exception):
    pass


def need(module):
    try:
        return __import__(module)
    except Exception as e:  # ImportError, or a framework that fails to find its libraries
        raise Skip(f"no {module}: {type(e).__name__}: {str(e)[:120]}")


def host(t):
    """A torch tensor or CuPy array as a numpy array, losslessly (half and bfloat16 widened)."""
    if hasattr(t, "detach"):
        import torch
        t = t.detach()
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        elif t.dtype == torch.complex32:
            t = t.to(torch.complex64)
        return t.cpu().numpy()
    if hasattr(t, "get"):
        return t.get()
    return np.asarray(t)


def rng():
    return np.random.RandomState(1234)


# ---- The driver alone: what every other check stands on, and the one that runs on the
# simulated driver too (no framework).

@check("driver", what="the driver API alone (ctypes): a context, an allocation, copies both ways")
def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    def ck(what, r):
        if r != 0:
            raise RuntimeError(f"{what}: CUresult {r}")
    ck("cuInit", cuda.cuInit(0))
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    ck("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ck("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    ck("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    data = rng().standard_normal(1 << 16).astype(np.float32)
    back = np.zeros_like(data)
    ck("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(data.nbytes)))
    ck("cuMemcpyHtoD", cuda.cuMemcpyHtoD_v2(ptr, data.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(data.nbytes)))
    ck("cuMemcpyDtoH", cuda.cuMemcpyDtoH_v2(back.ctypes.data_as(ctypes.c_void_p), ptr, ctypes.c_size_t(data.nbytes)))
    ck("cuMemFree", cuda.cuMemFree_v2(ptr))
    return {"round_trip": back}


# ---- cuFFT: every plan kind PyTorch and CuPy make.

@check("cufft_torch", what="torch.fft c2c/r2c/c2r, 1D/2D/3D, batched, float/double/half, a prime length")
def cufft_torch():
    torch = need("torch")
    r = rng()
    f32 = lambda *s: torch.from_numpy(r.standard_normal(s).astype(np.float32)).cuda()
    x = f32(8, 1000)
    out = {
        "c2c_1d_c64": torch.fft.fft(x.to(torch.complex64)),
        "c2c_1d_inverse": torch.fft.ifft(x.to(torch.complex64)),
        "r2c_1d_f32": torch.fft.rfft(x),
        "c2r_1d_f32": torch.fft.irfft(torch.fft.rfft(x), n=1000),
        "c2c_1d_c128": torch.fft.fft(x.double().to(torch.complex128)),
        "r2c_1d_f64": torch.fft.rfft(x.double()),
        "r2c_2d_f32": torch.fft.rfft2(f32(4, 64, 96)),
        "c2c_2d_c128": torch.fft.fft2(f32(4, 64, 96).double().to(torch.complex128)),
        "c2c_3d_c64": torch.fft.fftn(f32(2, 16, 32, 24).to(torch.complex64), dim=(1, 2, 3)),
        "c2r_3d_f32": torch.fft.irfftn(torch.fft.rfftn(f32(2, 16, 32, 24), dim=(1, 2, 3)), s=(16, 32, 24), dim=(1, 2, 3)),
        "r2c_1d_f16": torch.fft.rfft(f32(4, 256).half()),
        "c2c_1d_c32": torch.fft.fft(f32(4, 256).half().to(torch.complex32)),
        "c2c_1d_prime": torch.fft.fft(f32(3, 1009).to(torch.complex64)),
        "c2c_1d_large": torch.fft.fft(f32(1, 1 << 20).to(torch.complex64)),
    }
    torch.cuda.synchronize()
    return {k: host(v) for k, v in out.items()}


@check("cufft_cupy", what="cupy.fft c2c/r2c/c2r, 1D/2D/3D, batched, single and double")
def cufft_cupy():
    cp = need("cupy")
    r = rng()
    x = cp.asarray(r.standard_normal((8, 1000)).astype(np.float32))
    v = cp.asarray(r.standard_normal((2, 16, 32, 24)).astype(np.float32))
    out = {
        "c2c_1d_c64": cp.fft.fft(x.astype(cp.complex64)),
        "r2c_1d_f32": cp.fft.rfft(x),
        "c2r_1d_f32": cp.fft.irfft(cp.fft.rfft(x), n=1000),
        "c2c_1d_c128": cp.fft.fft(x.astype(cp.complex128)),
        "r2c_2d_f64": cp.fft.rfft2(x.reshape(2, 4, 1000).astype(cp.float64)),
        "c2c_3d_c64": cp.fft.fftn(v.astype(cp.complex64), axes=(1, 2, 3)),
        "c2r_3d_f32": cp.fft.irfftn(cp.fft.rfftn(v, axes=(1, 2, 3)), s=(16, 32, 24), axes=(1, 2, 3)),
        "c2c_1d_prime": cp.fft.ifft(cp.asarray(r.standard_normal((3, 1009))).astype(cp.complex64)),
    }
    cp.cuda.Device().synchronize()
    return {k: host(v) for k, v in out.items()}


# ---- cuSOLVER: dense factorisations through PyTorch and CuPy; CuPy's sparse solver.

def spd(r, n):
    a = r.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


@check("cusolver_torch", what="torch.linalg svd, eigh, qr, cholesky, lu_factor, solve, inv (cuSOLVER), batched svd/eigh")
def cusolver_torch():
    torch = need("torch")
    torch.backends.cuda.preferred_linalg_library("cusolver")
    r = rng()
    a = torch.from_numpy(r.standard_normal((96, 64))).cuda()
    s = torch.from_numpy(spd(r, 64)).cuda()
    b = torch.from_numpy(r.standard_normal((64, 3))).cuda()
    batch = torch.from_numpy(r.standard_normal((8, 24, 24)).astype(np.float32)).cuda()
    u, sv, vh = torch.linalg.svd(a, full_matrices=False)
    w, q = torch.linalg.eigh(s)
    qq, rr = torch.linalg.qr(a)
    lu, piv = torch.linalg.lu_factor(s)
    out = {
        "svd_s": sv, "svd_u": u, "svd_vh": vh, "eigh_w": w, "eigh_v": q, "qr_q": qq, "qr_r": rr,
        "cholesky": torch.linalg.cholesky(s), "lu": lu, "lu_pivots": piv, "solve": torch.linalg.solve(s, b),
        "inv": torch.linalg.inv(s), "svd_batched_s": torch.linalg.svdvals(batch),
        "eigh_batched_w": torch.linalg.eigvalsh(batch @ batch.transpose(1, 2)),
    }
    torch.cuda.synchronize()
    return {k: host(v) for k, v in out.items()}


@check("cusolver_cupy", what="cupy.linalg svd, eigh, qr, cholesky, solve, inv; cupyx sparse spsolve (cusolverSp)")
def cusolver_cupy():
    cp = need("cupy")
    r = rng()
    a = cp.asarray(r.standard_normal((96, 64)))
    s = cp.asarray(spd(r, 64))
    b = cp.asarray(r.standard_normal((64, 3)))
    u, sv, vh = cp.linalg.svd(a, full_matrices=False)
    w, q = cp.linalg.eigh(s)
    qq, rr = cp.linalg.qr(a)
    out = {"svd_s": sv, "svd_u": u, "svd_vh": vh, "eigh_w": w, "eigh_v": q, "qr_q": qq, "qr_r": rr,
           "cholesky": cp.linalg.cholesky(s), "solve": cp.linalg.solve(s, b), "inv": cp.linalg.inv(s)}
    try:
        import cupyx.scipy.sparse as sp
        import cupyx.scipy.sparse.linalg as spl
        m = sp.csr_matrix(s * (cp.abs(s) > 1.0))
        out["sparse_spsolve"] = spl.spsolve(m, cp.ascontiguousarray(b[:, 0]))
    except Exception as e:  # reported, not fatal: the dense part still says what it says
        print(f"note: cupyx sparse spsolve: {type(e).__name__}: {str(e)[:160]}")
    cp.cuda.Device().synchronize()
    return {k: host(v) for k, v in out.items()}


# ---- cuSPARSE, cuRAND.

@check("cusparse", tolerance=(1e-6, 1e-9), what="torch CSR @ dense (SpMM), COO mm; cupyx CSR SpMV, SpGEMM, transpose")
def cusparse():
    r = rng()
    dense = r.standard_normal((256, 192)) * (r.random_sample((256, 192)) < 0.05)
    rhs = r.standard_normal((192, 16))
    out = {}
    try:
        torch = need("torch")
        a = torch.from_numpy(dense).cuda()
        x = torch.from_numpy(rhs).cuda()
        out["torch_csr_mm"] = host(a.to_sparse_csr() @ x)
        out["torch_coo_mm"] = host(torch.sparse.mm(a.to_sparse(), x))
    except Skip as e:
        print(f"note: {e}")
    try:
        cp = need("cupy")
        import cupyx.scipy.sparse as sp
        m = sp.csr_matrix(cp.asarray(dense))
        out["cupy_spmv"] = host(m @ cp.asarray(rhs[:, 0]))
        out["cupy_spgemm"] = host((m @ m.T).toarray())
        out["cupy_transpose"] = host(m.T.tocsr().toarray())
    except Skip as e:
        print(f"note: {e}")
    if not out:
        raise Skip("neither torch nor cupy")
    return out


@check("curand", what="cupy.random with cuRAND's XORWOW, Philox and MRG32k3a generators, seeded")
def curand():
    cp = need("cupy")
    from cupy.cuda import curand as cr
    out = {}
    for label, method in (("xorwow", cr.CURAND_RNG_PSEUDO_XORWOW), ("philox", cr.CURAND_RNG_PSEUDO_PHILOX4_32_10),
                          ("mrg32k3a", cr.CURAND_RNG_PSEUDO_MRG32K3A)):
        g = cp.random.RandomState(seed=42, method=method)
        out[label + "_normal"] = host(g.standard_normal(100003, dtype=cp.float32))
        out[label + "_uniform"] = host(g.random_sample(4096, dtype=cp.float64))
    out["xorwow_lognormal"] = host(cp.random.RandomState(seed=7).lognormal(size=1000))
    return out


# ---- Run-time compilation: NVRTC (CuPy's RawKernel, PyTorch's jiterator) and nvJitLink.

KERNEL = r"""
extern "C" __global__ void axpb(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + sinf(x[i]) * 0.5f + (float)(i % 7);
}
"""


@check("nvrtc", what="cupy.RawKernel (NVRTC, then cuModuleLoadData), torch.cuda.jiterator")
def nvrtc():
    out = {}
    n = 100000
    x_host = rng().standard_normal(n).astype(np.float32)
    try:
        cp = need("cupy")
        k = cp.RawKernel(KERNEL, "axpb")
        x = cp.asarray(x_host)
        y = cp.zeros_like(x)
        k(((n + 255) // 256,), (256,), (x, y, np.float32(1.5), np.int32(n)))
        out["cupy_rawkernel"] = host(y)
    except Skip as e:
        print(f"note: {e}")
    try:
        torch = need("torch")
        fn = torch.cuda.jiterator._create_jit_fn("template <typename T> T fma3(T x, T y) { return x * y + T(3); }")
        a = torch.from_numpy(x_host).cuda()
        out["torch_jiterator"] = host(fn(a, a))
    except Skip as e:
        print(f"note: {e}")
    if not out:
        raise Skip("neither torch nor cupy")
    return out


def find_library(stem):
    """libSTEM.so* from the frameworks' pip packages (nvidia/*/lib), the toolkit, or the loader."""
    seen = []
    for base in sys.path + ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]:
        for pattern in (f"{base}/nvidia/*/lib/lib{stem}.so*", f"{base}/nvidia/*/*/lib/lib{stem}.so*", f"{base}/lib{stem}.so*"):
            seen += sorted(p for p in glob.glob(pattern) if ".alt." not in p)
    # The newest first (libnvrtc.so.13 before .so.12): NVRTC's LTO-IR is for nvJitLink of its version.
    seen.sort(key=lambda p: [int(n) for n in p.rsplit(".so", 1)[-1].split(".") if n.isdigit()], reverse=True)
    for p in seen:
        try:
            return ctypes.CDLL(p), p
        except OSError:
            continue
    try:
        return ctypes.CDLL(f"lib{stem}.so"), f"lib{stem}.so"
    except OSError:
        raise Skip(f"no lib{stem}.so found (pip nvidia/*/lib, /usr/local/cuda/lib64, the loader's path)")


def nvrtc_compile(lib, source, options):
    prog = ctypes.c_void_p()
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None) == 0
    rc = lib.nvrtcCompileProgram(prog, len(options), opts)
    if rc != 0:
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"nvrtcCompileProgram {rc}: {log.value.decode(errors='replace')[:400]}")
    lto = "-dlto" in options
    get_size, get = (lib.nvrtcGetLTOIRSize, lib.nvrtcGetLTOIR) if lto else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
    size = ctypes.c_size_t()
    assert get_size(prog, ctypes.byref(size)) == 0
    buf = ctypes.create_string_buffer(size.value)
    assert get(prog, buf) == 0
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return buf.raw


def jitlink(lib, arch, kind, image):
    h = ctypes.c_void_p()
    options = [f"-arch=sm_{arch}"] + (["-lto"] if kind == 3 else [])
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    rc = lib.nvJitLinkCreate(ctypes.byref(h), len(options), opts)
    if rc != 0:
        raise RuntimeError(f"nvJitLinkCreate {rc}")
    rc = lib.nvJitLinkAddData(h, kind, image, len(image), b"k")
    rc = rc or lib.nvJitLinkComplete(h)
    if rc != 0:
        size = ctypes.c_size_t()
        lib.nvJitLinkGetErrorLogSize(h, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value + 1)
        lib.nvJitLinkGetErrorLog(h, log)
        raise RuntimeError(f"nvJitLink {rc}: {log.value.decode(errors='replace')[:400]}")
    size = ctypes.c_size_t()
    assert lib.nvJitLinkGetLinkedCubinSize(h, ctypes.byref(size)) == 0
    cubin = ctypes.create_string_buffer(size.value)
    assert lib.nvJitLinkGetLinkedCubin(h, cubin) == 0
    lib.nvJitLinkDestroy(ctypes.byref(h))
    return cubin.raw


@check("nvjitlink", what="NVRTC to PTX and to LTO-IR, nvJitLink to a cubin, loaded and run by CuPy")
def nvjitlink():
    cp = need("cupy")
    arch = cp.cuda.Device().compute_capability  # "90" on an H200
    rtc, rtc_path = find_library("nvrtc")
    link, link_path = find_library("nvJitLink")
    print(f"note: {rtc_path}, {link_path}")
    n = 100000
    x = cp.asarray(rng().standard_normal(n).astype(np.float32))
    out = {}
    for label, kind, options in (("ptx", 2, [f"-arch=compute_{arch}"]), ("ltoir", 3, [f"-arch=compute_{arch}", "-dlto"])):
        cubin = jitlink(link, arch, kind, nvrtc_compile(rtc, KERNEL, options))
        module = cp.cuda.function.Module()
        module.load(cubin)
        y = cp.zeros_like(x)
        module.get_function("axpb")(((n + 255) // 256,), (256,), (x, y, np.float32(1.5), np.int32(n)))
        out[label] = host(y)
    return out


# ---- cuDNN 9's graph API, cuBLASLt with heuristics, NCCL on one GPU.

@check("cudnn", tolerance=(1e-3, 1e-3), what="torch conv2d forward/backward (float32, bf16), SDPA on cuDNN attention (bf16)")
def cudnn():
    torch = need("torch")
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 3, padding=1).cuda()
    r = rng()
    x = torch.from_numpy(r.standard_normal((8, 3, 64, 64)).astype(np.float32)).cuda().requires_grad_()
    y = conv(x)
    y.square().sum().backward()
    out = {"conv_f32": y, "conv_wgrad": conv.weight.grad, "conv_dgrad": x.grad,
           "conv_bf16": torch.nn.functional.conv2d(x.detach().bfloat16(), conv.weight.detach().bfloat16(), padding=1)}
    q, k, v = (torch.from_numpy(r.standard_normal((2, 4, 128, 64)).astype(np.float32)).cuda().bfloat16() for _ in range(3))
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out["sdpa_cudnn_bf16"] = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    except Exception as e:
        print(f"note: SDPA on cuDNN: {type(e).__name__}: {str(e)[:200]}")
    out["cudnn_version"] = np.array([torch.backends.cudnn.version()])
    torch.cuda.synchronize()
    return {k: host(v) for k, v in out.items()}


@check("cublaslt", what="torch addmm with a bias (cuBLASLt's bias epilogue), linear in bf16, bf16 and fp16 matmul, bmm")
def cublaslt():
    torch = need("torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    r = rng()
    f32 = lambda *s: torch.from_numpy(r.standard_normal(s).astype(np.float32)).cuda()
    a, b, bias = f32(384, 256), f32(256, 320), f32(320)
    w = f32(320, 256)
    out = {
        "addmm_bias_f32": torch.addmm(bias, a, b),
        "linear_bias_bf16": torch.nn.functional.linear(a.bfloat16(), w.bfloat16(), bias.bfloat16()),
        "linear_gelu_bf16": torch.nn.functional.gelu(torch.nn.functional.linear(a.bfloat16(), w.bfloat16(), bias.bfloat16())),
        "matmul_bf16": a.bfloat16() @ b.bfloat16(),
        "matmul_f16": a.half() @ b.half(),
        "bmm_f32": torch.bmm(f32(4, 64, 96), f32(4, 96, 32)),
    }
    torch.cuda.synchronize()
    return {k: host(v) for k, v in out.items()}


@check("nccl", what="torch.distributed NCCL, world size 1: all_reduce, broadcast, all_gather")
def nccl():
    torch = need("torch")
    import tempfile
    import torch.distributed as dist
    if not dist.is_nccl_available():
        raise Skip("torch without NCCL")
    store = tempfile.mktemp(prefix="gslice-nccl-")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="file://" + store, world_size=1, rank=0)
    try:
        t = torch.arange(1 << 16, device="cuda", dtype=torch.float32) * 0.5
        dist.all_reduce(t)
        b = torch.arange(1000, device="cuda", dtype=torch.int64)
        dist.broadcast(b, src=0)
        parts = [torch.zeros(64, device="cuda")]
        dist.all_gather(parts, torch.full((64,), 3.25, device="cuda"))
        torch.cuda.synchronize()
        out = {"all_reduce": host(t), "broadcast": host(b), "all_gather": host(parts[0]),
               "nccl_version": np.array(torch.cuda.nccl.version())}
    finally:
        dist.destroy_process_group()
        if os.path.exists(store):
            os.unlink(store)
    return out


@check("jax_jit", what="jax.jit with XLA's defaults (command buffers: CUDA graphs built by hand and by "
                        "capture into them, updated between runs): an MLP's training steps, a loop with a cond")
def jax_jit():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # Deterministic kernels and no autotuner, so that both runs pick the same kernels; command
    # buffers are left as XLA sets them (on).
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_gpu_deterministic_ops=true --xla_gpu_autotune_level=0").strip()
    jax = need("jax")
    import jax.numpy as jnp
    if not any(d.platform == "gpu" for d in jax.devices()):
        raise Skip("jax without a GPU backend")
    r = rng()
    sizes = [256, 512, 512, 512, 10]
    params = [(jnp.asarray(r.standard_normal((a, b)).astype(np.float32) / np.sqrt(a)), jnp.zeros((b,), jnp.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    x = jnp.asarray(r.standard_normal((64, sizes[0])).astype(np.float32))
    y = jnp.asarray(r.randint(0, sizes[-1], 64))

    def loss_fn(p):
        h = x
        for w, b in p[:-1]:
            h = jax.nn.relu(h @ w + b)
        logits = h @ p[-1][0] + p[-1][1]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

    @jax.jit
    def step(p):
        loss, g = jax.value_and_grad(loss_fn)(p)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(p, g)], loss

    @jax.jit
    def loop(v, w, n):
        # A loop whose trip count is an argument and a branch taken on the device: XLA's
        # while and conditional commands.
        def body(i, v):
            return jax.lax.cond(i % 2 == 0, lambda v: jnp.tanh(v @ w), lambda v: v * 0.5 + 1.0, v)
        return jax.lax.fori_loop(0, n, body, v)

    losses = []
    with jax.default_matmul_precision("highest"):
        for _ in range(6):  # the first run records the command buffers, the later ones update them
            params, loss = step(params)
            losses.append(float(loss))
        looped = [loop(x[:, :256], params[1][0][:256, :256], n) for n in (3, 8)]
    jax.block_until_ready(params)
    out = {"losses": np.array(losses, dtype=np.float32), "loop_3": np.asarray(looped[0]),
           "loop_8": np.asarray(looped[1])}
    for i, (w, b) in enumerate(params):
        out[f"w{i}"], out[f"b{i}"] = np.asarray(w), np.asarray(b)
    return out


# ---- Running and comparing.

def run(name, path):
    fn = CHECKS[name][0]
    try:
        if np is None:
            raise Skip("no numpy")
        results = fn()
    except Skip as e:
        print(f"SKIP {name}: {e}")
        return 3
    for key in sorted(results):
        a = results[key]
        print(f"{name}.{key}: {a.dtype} {list(a.shape)} sum={np.asarray(a, dtype=np.complex128).sum():.6g}")
    if path:
        np.savez(path, **results)
    print(f"done {name}: {len(results)} results")
    return 0


def compare(name, a_path, b_path):
    tolerance = CHECKS[name][1]
    a, b = np.load(a_path), np.load(b_path)
    if sorted(a.files) != sorted(b.files):
        print(f"FAIL different results: {sorted(set(a.files) ^ set(b.files))} in one run only")
        return 1
    worst, exact, bad = 0.0, 0, []
    for key in sorted(a.files):
        x, y = a[key], b[key]
        if x.shape != y.shape or x.dtype != y.dtype:
            bad.append(f"{key}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            continue
        if x.tobytes() == y.tobytes():
            exact += 1
            continue
        diff = float(np.max(np.abs(x.astype(np.complex128) - y.astype(np.complex128)))) if x.size else 0.0
        worst = max(worst, diff)
        if tolerance is None or not np.allclose(x, y, rtol=tolerance[0], atol=tolerance[1], equal_nan=True):
            bad.append(f"{key}: max |diff| {diff:.3g}")
    rule = "bit for bit" if tolerance is None else f"rtol {tolerance[0]:g} atol {tolerance[1]:g}"
    if bad:
        print(f"FAIL {len(bad)} of {len(a.files)} results differ ({rule}): " + "; ".join(bad)[:600])
        return 1
    print(f"PASS {len(a.files)} results, {exact} bit for bit" + ("" if exact == len(a.files) else
                                                                f", the rest within {rule} (max |diff| {worst:.3g})"))
    return 0


def main(argv):
    if len(argv) >= 1 and argv[0] == "list":
        for name, (_, tolerance, what) in CHECKS.items():
            print(f"{name}\t{'bit for bit' if tolerance is None else 'rtol %g atol %g' % tolerance}\t{what}")
        return 0
    if len(argv) in (2, 3) and argv[0] == "run" and argv[1] in CHECKS:
        return run(argv[1], argv[2] if len(argv) == 3 else None)
    if len(argv) == 4 and argv[0] == "compare" and argv[1] in CHECKS:
        return compare(*argv[1:])
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    print("checks: " + " ".join(CHECKS), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
