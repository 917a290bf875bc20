"""`kpatch selftest [--quick] [--report DIR]`: PyTorch on the GPU under `kpatch run`, compared with the CPU."""

from __future__ import annotations

import os
import time

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, err_console


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False)


@click.command("selftest")
@click.option("--quick", is_flag=True, help="Only the quick cases (a few minutes).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False),
              help="Where to write report.json and report.html (default: ./kpatch-selftest-DATE-TIME).")
@click.option("--only", multiple=True, metavar="PATTERN",
              help="Run only the cases whose names match (shell pattern; repeatable), e.g. 'conv3x3*'.")
@click.option("--list", "list_only", is_flag=True, help="List the cases and exit.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              help="Seconds one case may run before it is killed and marked hung.")
@click.option("--python", "python", type=click.Path(dir_okay=False),
              help="The Python that has your PyTorch (default: the first of kpatch's own and `python3` on PATH "
                   "that imports torch).")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="cuda: the GPU (ROCm's PyTorch calls it cuda). cpu: runs the cases on the CPU without the "
                   "hook; it only tests kpatch's harness.")
@click.option("--mode", type=click.Choice(["override", "harden"]),
              help="As for `kpatch run` (default: override when a gfx1010 GPU is found).")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), help="kpatch's cache, as for `kpatch run`.")
@click.option("--root", default="/", hidden=True, type=click.Path(file_okay=False),
              help="The file-system root whose /sys is inspected (tests: a fake tree).")
def selftest_cmd(quick, report_dir, only, list_only, timeout, python, device, mode, cache_dir, root) -> None:
    """Run PyTorch cases on the GPU through `kpatch run` and write a report to share.

    Each case (Conv2d forward / backward-data / backward-weights over
    shapes that pick different MIOpen solvers, fp32 and fp16; batch-norm;
    pooling; activations; softmax; nn.Linear / matmul sizes that pick Tensile
    kernels; 3 training steps of a ResNet-18) runs in its own process under
    the load-time hook, with a timeout, and is compared with the same
    computation on the CPU (tolerance per op). A case that faults or hangs
    is marked crashed / hung and the others go on. The report
    (report.json, report.html) lists pass / wrong / crashed / hung / error
    per case and check, timings, the doctor's output and which code
    objects were patched or refused; home directory, user and host names are
    removed from it.

    Without a GPU it says so and stops: GPU cases never run on the CPU.
    Exit status 0 when every case passed, 1 otherwise, 2 when nothing could
    be run.
    """
    from kpatch.fieldkit import doctor
    from kpatch.fieldkit import report as reportmod
    from kpatch.fieldkit import selftest as st

    if list_only:
        found, tried = doctor.find_torch_python(python, dict(os.environ))
        if found is None:
            from kpatch.errors import UsageError
            raise UsageError("no Python that imports torch (" + "; ".join(f"{t.python}: {t.error}" for t in tried)
                             + "); pass --python PATH")
        for c in st.select(st.list_cases(found.python, os.environ), quick, list(only)):
            print(f"{c['name']:<24} {'quick ' if c['quick'] else '      '}tolerance {c['tolerance']:g}  {c['what']}")
        raise SystemExit(EXIT_OK)

    def on_start(name: str, i: int, n: int) -> None:
        _say(f"[{i + 1}/{n}] {name} ...")

    def on_case(r: dict) -> None:
        bad = [c for c in r["checks"] if c["status"] not in ("pass", "skipped")]
        why = "; ".join(f"{c['check']}: {c['status']} {c.get('detail') or ''}".strip() for c in bad)
        _say(f"      {r['status']} ({r['seconds']:.1f} s){': ' + why if why else ''}"
             + (f": {r['detail']}" if r.get("detail") and not why else ""))

    opts = st.Options(device=device, quick=quick, only=list(only), timeout=timeout, python=python, mode=mode,
                      cache_dir=cache_dir, root=os.path.abspath(root), on_start=on_start, on_case=on_case)
    rep = st.selftest(opts)
    out_dir = report_dir or os.path.abspath(time.strftime("kpatch-selftest-%Y%m%d-%H%M%S"))
    clean, jpath, hpath = reportmod.write(rep, out_dir, os.environ)
    n = clean["counts"]
    _say(f"selftest ({device}{', harness test only' if device == 'cpu' else ''}): "
         + ", ".join(f"{v} {k}" for k, v in n.items() if v) + f" of {len(clean['cases'])} case(s)")
    _say(f"report: {jpath}")
    _say(f"report: {hpath}")
    if device == "cuda":
        _say("please attach both files to an issue in kpatch's tracker (they hold no home directory, user or "
             "host name)")
    raise SystemExit(EXIT_OK if st.exit_ok(clean) else EXIT_SOME_FAILED)
