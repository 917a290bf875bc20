"""The selftest report: JSON, and one self-contained HTML page, with nothing personal in it.

:func:`scrub` rewrites every string of the report before it is written: the
home directory becomes ``~``, the user name ``<user>`` and the host name
``<host>`` (the doctor never reads serial numbers, PCI locations or MAC
addresses, so there are none to remove).  The HTML page has no script, no
external resource and no link: it can be attached to an issue and opened
anywhere.  Each case is a table row ``<tr class="case" data-case=NAME
data-status=STATUS>``; the counts are in ``<td data-count=STATUS>``.
"""

from __future__ import annotations

import getpass
import html
import json
import os
import re
import socket
from typing import Mapping

from kpatch.atomicfile import write_atomic

JSON_NAME = "report.json"
HTML_NAME = "report.html"


def personal_strings(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(text, replacement) pairs, longest text first."""
    pairs = []
    for home in {env.get("HOME", ""), os.path.expanduser("~")}:
        if home and home not in ("/", "") and len(home) > 1:
            pairs.append((home.rstrip("/"), "~"))
    users = {env.get("USER", ""), env.get("LOGNAME", "")}
    try:
        users.add(getpass.getuser())
    except (KeyError, OSError):
        pass
    for u in users:
        if u and len(u) >= 2 and u != "root":
            pairs.append((u, "<user>"))
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    if host and len(host) >= 3 and host != "localhost":
        pairs.append((host, "<host>"))
    return sorted(set(pairs), key=lambda p: -len(p[0]))


def scrub(obj, pairs: list[tuple[str, str]]):
    """``obj`` with every personal string replaced (in keys and values).
    User and host names are replaced where they stand as a whole word."""
    if isinstance(obj, str):
        for text, repl in pairs:
            if repl == "~":
                obj = obj.replace(text, repl)
            else:
                obj = re.sub(r"(?<![A-Za-z0-9_.-])" + re.escape(text) + r"(?![A-Za-z0-9_-])", repl, obj)
        return obj
    if isinstance(obj, dict):
        return {scrub(k, pairs): scrub(v, pairs) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, pairs) for v in obj]
    return obj


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}
.pass,.ok{background:#e5f5e5}.wrong,.warning{background:#fff3cd}.crashed,.hung,.error,.problem{background:#f8d7da}
.skipped{background:#eee}pre{white-space:pre-wrap;font-size:12px;margin:0}.note{color:#555}
"""


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _ms(v) -> str:
    return "" if v is None else f"{v:.2f}"


def render_html(rep: dict) -> str:
    """The report as one self-contained HTML page."""
    p = rep["platform"]
    out = ["<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
           f"<title>kpatch selftest {_e(rep['date'])}</title><style>{CSS}</style></head><body>",
           f"<h1>kpatch selftest</h1>"]
    if rep.get("harness_only"):
        out.append("<p class=note id=harness-only><b>Device: CPU.</b> This report tests kpatch's harness only: "
                   "no GPU code ran and nothing was patched.</p>")
    out.append("<table id=summary>")
    for k, v in (("date", rep["date"]), ("kpatch", rep["kpatch_version"]), ("device", rep["device"]),
                 ("GPU", p.get("device_name")), ("architecture", p.get("arch")), ("PyTorch", p.get("torch")),
                 ("HIP", p.get("hip")), ("Python", p.get("python")),
                 ("hook", (rep["hook"].get("mode") + " mode") if rep["hook"].get("used") else "not used"),
                 ("timeout per case", f"{rep['timeout_s']:g} s")):
        out.append(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>")
    out.append("</table><table id=counts><tr>" + "".join(f"<th>{_e(s)}</th>" for s in rep["counts"]) + "</tr><tr>"
               + "".join(f"<td class='num {_e(s)}' data-count='{_e(s)}'>{n}</td>" for s, n in rep["counts"].items())
               + "</tr></table>")
    out.append("<h2>Cases</h2><table id=cases><tr><th>case</th><th>status</th><th>check</th><th>result</th>"
               "<th>error / tolerance</th><th>first ms</th><th>ms</th><th>CPU ms</th><th>detail</th></tr>")
    for r in rep["cases"]:
        checks = r["checks"] or [{"check": "", "status": r["status"], "detail": r.get("detail", "")}]
        n = len(checks)
        for i, c in enumerate(checks):
            row = f"<tr class='case' data-case='{_e(r['name'])}' data-status='{_e(r['status'])}'>" if i == 0 else "<tr>"
            if i == 0:
                row += (f"<td rowspan={n}><b>{_e(r['name'])}</b><br><span class=note>{_e(r['what'])}</span></td>"
                        f"<td rowspan={n} class='{_e(r['status'])}'>{_e(r['status'])}<br><span class=note>"
                        f"{_e(r['exit'])}, {r['seconds']:.1f} s</span></td>")
            err = c.get("error")
            err_text = "" if err is None else (f"{err:.3g}" if isinstance(err, (int, float)) else str(err))
            if c.get("tolerance") is not None:
                err_text += f" / {c['tolerance']:g}"
            row += (f"<td>{_e(c.get('check'))}</td><td class='{_e(c.get('status'))}' data-check-status>"
                    f"{_e(c.get('status'))}</td><td class=num>{_e(err_text)}</td><td class=num>{_ms(c.get('ms_first'))}"
                    f"</td><td class=num>{_ms(c.get('ms'))}</td><td class=num>{_ms(c.get('ms_cpu'))}</td>"
                    f"<td>{_e(c.get('detail'))}</td></tr>")
            out.append(row)
        if r.get("output_tail"):
            out.append(f"<tr class=output><td colspan=9><pre>{_e(chr(10).join(r['output_tail']))}</pre></td></tr>")
        for o in (r.get("hook") or {}).get("objects") or []:
            kern = "; ".join(f"{k['name']}: {'; '.join(k['reasons'])}" for k in o.get("refused_kernels") or [])
            out.append(f"<tr class=hook><td colspan=9>kpatch {_e(o['action'])} {_e(o['key'])}: "
                       f"{_e(kern or o.get('reason'))}</td></tr>")
    out.append("</table>")
    hook = rep["hook"]
    out.append("<h2>Load-time patching</h2>")
    if hook.get("used"):
        s = hook.get("summary") or {}
        out.append(f"<p>{_e(hook['mode'])} mode ({_e(hook['why'])}); {s.get('loads', 0)} code object load(s), "
                   f"{s.get('cache_hits', 0)} cache hit(s).</p><table id=hook><tr><th>action</th><th>loads</th>"
                   "<th>objects</th></tr>")
        for a, v in (s.get("actions") or {}).items():
            out.append(f"<tr><td>{_e(a)}</td><td class=num>{v['loads']}</td><td class=num>{v['objects']}</td></tr>")
        out.append("</table><ul id=refused>")
        for o in s.get("objects") or []:
            for k in o.get("refused_kernels") or []:
                out.append(f"<li>{_e(o['action'])} {_e(o['key'])}: kernel {_e(k['name'])}: "
                           f"{_e('; '.join(k['reasons']))}</li>")
            if not o.get("refused_kernels"):
                out.append(f"<li>{_e(o['action'])} {_e(o['key'])}: {_e(o.get('reason'))}</li>")
        out.append("</ul>")
        for st in hook.get("steered") or []:
            out.append(f"<p>set {_e(st['env'])}={_e(st['value'])}: {_e(st['reason'])}</p>")
    else:
        out.append("<p>The load-time hook was not used (CPU device).</p>")
    out.append("<h2>kpatch doctor</h2><table id=doctor><tr><th>status</th><th>topic</th><th>finding</th>"
               "<th>next</th></tr>")
    for c in rep["doctor"]["checks"]:
        out.append(f"<tr class='{_e(c['status'])}'><td>{_e(c['status'])}</td><td>{_e(c['topic'])}</td>"
                   f"<td>{_e(c['text'])}</td><td><code>{_e(c.get('next'))}</code></td></tr>")
    out.append("</table></body></html>\n")
    return "\n".join(out)


def write(rep: dict, directory: str, env: Mapping[str, str]) -> tuple[dict, str, str]:
    """Scrub the report and write ``report.json`` and ``report.html`` into
    ``directory`` (created; each file written atomically).  Returns the
    scrubbed report and the two paths."""
    clean = scrub(rep, personal_strings(env))
    os.makedirs(directory, exist_ok=True)
    jpath, hpath = os.path.join(directory, JSON_NAME), os.path.join(directory, HTML_NAME)
    write_atomic(jpath, (json.dumps(clean, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    write_atomic(hpath, render_html(clean).encode("utf-8"))
    return clean, jpath, hpath
