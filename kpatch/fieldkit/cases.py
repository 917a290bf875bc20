"""The PyTorch cases of ``kpatch selftest``: a standalone script.

Run by the user's Python (the one with torch; it imports nothing from
kpatch), one case per process, so that a GPU fault or hang ends only that
case::

    python cases.py list                        # the cases, as JSON
    python cases.py probe --device cuda         # can torch reach the GPU? (JSON)
    python cases.py run NAME --device cuda --out FILE

``run`` writes JSON lines to FILE as it goes: ``{"event": "start",
"check": C}`` before each check and ``{"event": "result", ...}`` after it,
flushed, so the harness knows which check was running when the process
crashed or hung.  A check runs the computation on the device (the first run
timed on its own: it includes MIOpen's compiling and searching; then the
median of REPEAT runs), runs the same computation on the CPU in float32
from the same inputs (fp16 inputs are rounded to fp16 first, then widened),
and compares: the error is ``max|device - cpu| / max|cpu|``, against the
tolerance stated per case (:data:`TOL`).  Anything not finite on the device
where the CPU result is finite is a wrong result.

The device is never replaced by the CPU: with ``--device cuda`` a torch that
cannot reach a ROCm GPU makes ``run`` stop with exit status 3 (and ``probe``
say why); every device result is checked to live on the device.
``--device cpu`` runs the device side on the CPU too: it exists only to test
the harness.  Cases named ``selfcheck-*`` (a wrong result, a hang, a
segmentation fault, an exception) exist for the same reason and are listed
only with ``list --all``.
"""

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time

#: normalised error allowed (max|device - cpu| / max|cpu|), by kind of op and dtype
TOL = {
    ("conv", "float32"): 1e-3, ("conv", "float16"): 1e-2,
    ("gemm", "float32"): 1e-4, ("gemm", "float16"): 5e-3,
    ("norm", "float32"): 1e-4, ("norm", "float16"): 5e-3,
    ("pool", "float32"): 1e-6, ("pool", "float16"): 1e-3,
    ("pointwise", "float32"): 1e-5, ("pointwise", "float16"): 2e-3,
    ("train", "float32"): 2e-2,
}
#: timed runs after the first
REPEAT = 3
EXIT_NO_DEVICE = 3


class Case:
    """One case: a name, the kind of op, the dtype, and a function that makes
    its inputs and returns its checks ({check name: fn(tensors) -> [outputs]})."""

    def __init__(self, name, kind, dtype, build, quick=False, hidden=False, what=""):
        self.name, self.kind, self.dtype, self.build = name, kind, dtype, build
        self.quick, self.hidden, self.what = quick, hidden, what

    @property
    def tol(self):
        return TOL.get((self.kind, self.dtype), 1e-3)

    def to_json(self):
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "quick": self.quick,
                "hidden": self.hidden, "tolerance": self.tol, "what": self.what}


CASES = []


def add(*args, **kw):
    CASES.append(Case(*args, **kw))


# ---------------------------------------------------------------- the cases

def conv(n, c, h, w, k, r, stride=1, pad=0, dil=1, groups=1):
    """Conv2d forward, backward-data and backward-weights."""
    def build(torch, F):
        x = torch.randn(n, c, h, w)
        wt = torch.randn(k, c // groups, r, r) / math.sqrt(c // groups * r * r)
        gy = torch.randn(F.conv2d(x, wt, None, stride, pad, dil, groups).shape)

        def fwd(t):
            return [F.conv2d(t["x"], t["w"], None, stride, pad, dil, groups)]

        def bwd_data(t):
            x_ = t["x"].detach().requires_grad_()
            F.conv2d(x_, t["w"], None, stride, pad, dil, groups).backward(t["gy"])
            return [x_.grad]

        def bwd_weights(t):
            w_ = t["w"].detach().requires_grad_()
            F.conv2d(t["x"], w_, None, stride, pad, dil, groups).backward(t["gy"])
            return [w_.grad]

        return {"x": x, "w": wt, "gy": gy}, {"forward": fwd, "backward-data": bwd_data, "backward-weights": bwd_weights}
    return build


CONVS = [  # name, shape, quick, what MIOpen tends to pick
    ("conv1x1", (8, 64, 28, 28, 64, 1), {}, True, "1x1: GEMM / direct 1x1 solvers"),
    ("conv3x3", (8, 64, 28, 28, 64, 3), {"pad": 1}, True, "3x3 stride 1: Winograd"),
    ("conv3x3s2", (8, 64, 28, 28, 128, 3), {"stride": 2, "pad": 1}, False, "3x3 stride 2: direct / implicit GEMM"),
    ("conv5x5", (4, 32, 28, 28, 32, 5), {"pad": 2}, False, "5x5: direct / Winograd RxS"),
    ("conv7x7s2", (4, 3, 112, 112, 64, 7), {"stride": 2, "pad": 3}, False, "7x7 stride 2 (ResNet stem)"),
    ("conv3x3dil2", (4, 32, 28, 28, 32, 3), {"pad": 2, "dil": 2}, False, "dilation 2: GEMM / naive"),
    ("conv3x3g4", (4, 64, 28, 28, 64, 3), {"pad": 1, "groups": 4}, False, "groups 4"),
    ("conv3x3dw", (4, 64, 28, 28, 64, 3), {"pad": 1, "groups": 64}, True, "depthwise"),
]
for _name, _shape, _kw, _quick, _what in CONVS:
    for _dt in ("float32", "float16"):
        add(f"{_name}-{'fp32' if _dt == 'float32' else 'fp16'}", "conv", _dt, conv(*_shape, **_kw),
            quick=_quick and (_dt == "float32" or _name == "conv3x3"), what="Conv2d " + _what)


def batchnorm(train):
    def build(torch, F):
        x = torch.randn(8, 32, 16, 16) * 2 + 0.5
        g, b = torch.rand(32) + 0.5, torch.randn(32)
        rm, rv = torch.randn(32) * 0.1, torch.rand(32) + 0.5
        gy = torch.randn(8, 32, 16, 16)

        def fwd(t):
            m, v = t["rm"].clone(), t["rv"].clone()
            y = F.batch_norm(t["x"], m, v, t["g"], t["b"], training=train, momentum=0.1, eps=1e-5)
            return [y, m, v]

        def bwd(t):
            x_, g_, b_ = (t[k].detach().requires_grad_() for k in ("x", "g", "b"))
            F.batch_norm(x_, t["rm"].clone(), t["rv"].clone(), g_, b_, training=train, eps=1e-5).backward(t["gy"])
            return [x_.grad, g_.grad, b_.grad]

        return {"x": x, "g": g, "b": b, "rm": rm, "rv": rv, "gy": gy}, {"forward": fwd, "backward": bwd}
    return build


for _dt in ("float32", "float16"):
    _sfx = "fp32" if _dt == "float32" else "fp16"
    add(f"batchnorm-train-{_sfx}", "norm", _dt, batchnorm(True), quick=_dt == "float32",
        what="BatchNorm2d in training mode (MIOpen batch-norm kernels)")
    add(f"batchnorm-eval-{_sfx}", "norm", _dt, batchnorm(False), what="BatchNorm2d in eval mode")


def pooling(torch, F):
    x = torch.randn(8, 32, 32, 32)
    gy_max = torch.randn(F.max_pool2d(x, 3, 2, 1).shape)
    gy_avg = torch.randn(F.avg_pool2d(x, 2).shape)

    def maxp(t):
        x_ = t["x"].detach().requires_grad_()
        y = F.max_pool2d(x_, 3, 2, 1)
        y.backward(t["gmax"])
        return [y, x_.grad]

    def avgp(t):
        x_ = t["x"].detach().requires_grad_()
        y = F.avg_pool2d(x_, 2)
        y.backward(t["gavg"])
        return [y, x_.grad]

    def adaptive(t):
        return [F.adaptive_avg_pool2d(t["x"], 1)]

    return {"x": x, "gmax": gy_max, "gavg": gy_avg}, {"max3x3s2": maxp, "avg2x2": avgp, "adaptive-avg": adaptive}


def activations(torch, F):
    x = torch.randn(64, 1024) * 3
    gy = torch.randn(64, 1024)
    fns = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
           "leaky-relu": lambda v: F.leaky_relu(v, 0.1)}

    def make(fn):
        def check(t):
            x_ = t["x"].detach().requires_grad_()
            y = fn(x_)
            y.backward(t["gy"])
            return [y, x_.grad]
        return check

    return {"x": x, "gy": gy}, {name: make(fn) for name, fn in fns.items()}


def softmax(torch, F):
    x = torch.randn(128, 1000) * 4
    gy = torch.randn(128, 1000)

    def make(fn):
        def check(t):
            x_ = t["x"].detach().requires_grad_()
            y = fn(x_, dim=-1)
            y.backward(t["gy"])
            return [y, x_.grad]
        return check

    return {"x": x, "gy": gy}, {"softmax": make(F.softmax), "log-softmax": make(F.log_softmax)}


for _dt in ("float32", "float16"):
    _sfx = "fp32" if _dt == "float32" else "fp16"
    add(f"pooling-{_sfx}", "pool", _dt, pooling, quick=_dt == "float32", what="max/avg/adaptive pooling, with backward")
    add(f"activations-{_sfx}", "pointwise", _dt, activations, quick=_dt == "float32",
        what="ReLU, GELU, SiLU, sigmoid, tanh, leaky ReLU, with backward")
    add(f"softmax-{_sfx}", "pointwise", _dt, softmax, what="softmax / log-softmax over 1000 classes, with backward")


def linear(m, k, n):
    """nn.Linear forward and both backward GEMMs (rocBLAS / Tensile)."""
    def build(torch, F):
        x = torch.randn(m, k)
        w = torch.randn(n, k) / math.sqrt(k)
        b = torch.randn(n)
        gy = torch.randn(m, n)

        def fwd(t):
            return [F.linear(t["x"], t["w"], t["b"])]

        def bwd(t):
            x_, w_ = t["x"].detach().requires_grad_(), t["w"].detach().requires_grad_()
            F.linear(x_, w_, t["b"]).backward(t["gy"])
            return [x_.grad, w_.grad]

        return {"x": x, "w": w, "b": b, "gy": gy}, {"forward": fwd, "backward": bwd}
    return build


def bmm(torch, F):
    a, b = torch.randn(16, 128, 64), torch.randn(16, 64, 128)
    return {"a": a, "b": b}, {"bmm": lambda t: [torch.bmm(t["a"], t["b"])],
                              "matmul-square": lambda t: [t["a"][0] @ t["a"][0].t()]}


for _dt in ("float32", "float16"):
    _sfx = "fp32" if _dt == "float32" else "fp16"
    add(f"linear-1024-{_sfx}", "gemm", _dt, linear(256, 1024, 1024), quick=True,
        what="nn.Linear 256x1024 -> 1024 (Tensile assembly GEMM)")
    add(f"linear-odd-{_sfx}", "gemm", _dt, linear(127, 255, 129), what="nn.Linear with odd sizes (edge tiles)")
    add(f"linear-wide-{_sfx}", "gemm", _dt, linear(64, 4096, 1000), what="nn.Linear 4096 -> 1000 (classifier)")
    add(f"matmul-batched-{_sfx}", "gemm", _dt, bmm, what="batched matmul (strided batched GEMM)")


def resnet18(torch, F):
    """A few SGD steps of ResNet-18 (defined here: no torchvision, no download)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return F.relu(y + (self.down(x) if self.down is not None else x))

    class ResNet18(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))

    model = ResNet18()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x, labels = torch.randn(4, 3, 64, 64), torch.randint(0, 10, (4,))

    def train(t):
        dev = t["x"].device
        m = ResNet18().to(dev)
        m.load_state_dict({k: v.to(dev) for k, v in state.items()})
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = F.cross_entropy(m(t["x"]), t["labels"])
            loss.backward()
            opt.step()
            losses.append(loss.detach().reshape(1))
        m.eval()
        return [torch.cat(losses), m(t["x"]).detach()]

    return {"x": x, "labels": labels}, {"train-3-steps": train}


add("resnet18-train-fp32", "train", "float32", resnet18, quick=True,
    what="3 SGD steps of an inline ResNet-18 (convolutions, batch-norm, pooling, GEMM, backward)")


# ---------------------------------------------------------------- cases that test the harness

def selfcheck(kind):
    def build(torch, F):
        x = torch.arange(16, dtype=torch.float32)

        def check(t):
            if kind == "sleep":
                while True:
                    time.sleep(3600)
            if kind == "segv":
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGSEGV)
            if kind == "raise":
                raise RuntimeError("selfcheck: an exception inside the case")
            y = t["x"] * 2
            if kind == "wrong" and t.get("_device_side"):
                y = y + 1  # a deliberately wrong device result
            return [y]

        return {"x": x}, {"check": check}
    return build


for _kind in ("pass", "wrong", "sleep", "segv", "raise"):
    add(f"selfcheck-{_kind}", "pointwise", "float32", selfcheck(_kind), hidden=True,
        what=f"harness test: {_kind}")


# ---------------------------------------------------------------- the runner

class Out:
    """The JSON-lines result file, flushed line by line."""

    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")

    def emit(self, **obj):
        self.f.write(json.dumps(obj) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def _sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(torch, device, fn, t):
    _sync(torch, device)
    t0 = time.perf_counter()
    out = fn(t)
    _sync(torch, device)
    return out, (time.perf_counter() - t0) * 1e3


def _compare(torch, got, ref, tol):
    """(status, error, detail) of device outputs against CPU outputs."""
    if len(got) != len(ref):
        return "wrong", None, f"{len(got)} outputs, the CPU gave {len(ref)}"
    worst = 0.0
    for i, (g, r) in enumerate(zip(got, ref)):
        g = g.detach().to("cpu", torch.float32)
        r = r.detach().to("cpu", torch.float32)
        if tuple(g.shape) != tuple(r.shape):
            return "wrong", None, f"output {i}: shape {tuple(g.shape)}, the CPU gave {tuple(r.shape)}"
        bad = (~torch.isfinite(g)) & torch.isfinite(r)
        if bool(bad.any()):
            return "wrong", math.inf, f"output {i}: {int(bad.sum())} value(s) not finite where the CPU's are"
        scale = float(r.abs().max()) if r.numel() else 0.0
        err = float((g - r).abs().max()) / max(scale, 1e-30) if r.numel() else 0.0
        worst = max(worst, err)
    if worst > tol:
        return "wrong", worst, f"error {worst:.3g} > tolerance {tol:g}"
    return "pass", worst, ""


def run_case(case, device, out_path):
    import torch
    import torch.nn.functional as F

    out = Out(out_path)
    if device == "cuda" and not (torch.cuda.is_available() and getattr(torch.version, "hip", None)):
        out.emit(event="no-device", reason="torch cannot reach a ROCm GPU")
        sys.exit(EXIT_NO_DEVICE)
    dtype = getattr(torch, case.dtype)
    torch.manual_seed(0)
    inputs, checks = case.build(torch, F)
    # the same values for both sides: rounded to the case's dtype once
    rounded = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inputs.items()}
    dev_in = {k: v.to(device) for k, v in rounded.items()}
    dev_in["_device_side"] = True
    ref_in = {k: (v.to(torch.float32) if v.is_floating_point() else v) for k, v in rounded.items()}
    for name, fn in checks.items():
        out.emit(event="start", check=name)
        torch.manual_seed(1)
        try:
            got, ms_first = _timed(torch, device, fn, dev_in)
            times = []
            for _ in range(REPEAT):
                torch.manual_seed(1)
                _, ms = _timed(torch, device, fn, dev_in)
                times.append(ms)
        except Exception as e:  # the op failed on the device (a HIP error, an op not implemented)
            msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            if device == "cpu" and dtype == torch.float16 and "Half" in str(e):
                out.emit(event="result", check=name, status="skipped", detail="fp16 is not implemented on the CPU: "
                         + msg)
            else:
                out.emit(event="result", check=name, status="error", detail=msg)
            continue
        wrong_device = [str(g.device) for g in got if g.device.type != torch.device(device).type]
        if wrong_device:
            out.emit(event="result", check=name, status="error", detail=f"a result came back on {wrong_device[0]}, "
                     f"not {device}")
            continue
        torch.manual_seed(1)
        ref, ms_cpu = _timed(torch, "cpu", fn, ref_in)
        status, err, detail = _compare(torch, got, ref, case.tol)
        out.emit(event="result", check=name, status=status, error=err if err is None or math.isfinite(err) else "inf",
                 tolerance=case.tol, detail=detail, ms_first=round(ms_first, 3),
                 ms=round(statistics.median(times), 3), ms_cpu=round(ms_cpu, 3))


def probe(device):
    info = {"ok": False, "device": device, "reason": None}
    try:
        import torch
    except BaseException as e:
        info["reason"] = f"cannot import torch: {type(e).__name__}: {e}"
        return info
    info["torch"] = torch.__version__
    info["hip"] = getattr(torch.version, "hip", None)
    if device == "cpu":
        info.update(ok=True, device_name="CPU (harness test only: no GPU code runs)")
        return info
    if not info["hip"]:
        info["reason"] = (f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None); "
                          "selftest does not run GPU cases on the CPU")
        return info
    if not torch.cuda.is_available():
        info["reason"] = ("torch.cuda.is_available() is False: PyTorch sees no GPU "
                          "(selftest does not run GPU cases on the CPU)")
        return info
    props = torch.cuda.get_device_properties(0)
    info.update(ok=True, device_name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
                arch=getattr(props, "gcnArchName", None), compute_units=getattr(props, "multi_processor_count", None))
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(prog="cases.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_list = sub.add_parser("list")
    p_list.add_argument("--all", action="store_true")
    p_probe = sub.add_parser("probe")
    p_probe.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p_run = sub.add_parser("run")
    p_run.add_argument("name")
    p_run.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p_run.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "list":
        print(json.dumps([c.to_json() for c in CASES if a.all or not c.hidden]))
    elif a.cmd == "probe":
        print(json.dumps(probe(a.device)))
    else:
        case = next((c for c in CASES if c.name == a.name), None)
        if case is None:
            print(f"error: {a.name}: no such case", file=sys.stderr)
            sys.exit(2)
        run_case(case, a.device, a.out)


if __name__ == "__main__":
    main()
