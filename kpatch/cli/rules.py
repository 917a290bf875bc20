"""`kpatch rules`: list the rule sets and explain each rule."""

from __future__ import annotations

import json
import sys

import click

from kpatch.rewrite.rules import load_all


def _actions(r) -> list[str]:
    """What the rule does, one string per action key, as the rule file says it."""
    out = [f"set {', '.join(f'{k}={v}' for k, v in r.set_fields)}"] if r.set_fields else []
    for a in ("replace", "insert_before", "insert_after"):
        seq = getattr(r, a)
        if seq:
            out.append(f"{a} " + "; ".join(" ".join([s.op, *(f"{k}={v:#x}" for k, v in s.fields)]) for s in seq))
    if r.fix:
        out.append(f"fix {r.fix}")
    if r.header:
        out.append("header " + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in r.header))
    return out


def _rule_record(r) -> dict:
    return {"id": r.id, "name": r.name, "set": r.set_id, "summary": r.summary, "explain": r.explain,
            "matches": ("code object header" + (f" (fixes {r.finding})" if r.finding else "")) if r.on_object
            else r.finding or r.mnemonic.pattern, "actions": _actions(r)}


@click.command("rules")
@click.argument("rule", required=False, metavar="[RULE_OR_SET]")
@click.option("--rules", "extra", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Also load this rule file (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def rules_cmd(rule: str | None, extra: tuple[str, ...], as_json: bool) -> None:
    """List the rule sets and their rules, or explain one rule or set.

    RULE_OR_SET is a rule id (KH001), a rule name (vmem-to-scalar-write) or
    a rule set id (gfx1010-hazards).  Rule files are TOML; the schema is in
    the docstring of kpatch/rewrite/rules.py and in rules/README.md.

    Exit status: 0; 1 for a --rules file that is not a valid rule file; 2
    for an unknown RULE_OR_SET or a --rules file that does not exist; 3 on
    an internal error.
    """
    sets = load_all(list(extra), build_builtin=False)  # listing: the ISA tables stay unloaded
    if rule is None:
        if as_json:
            json.dump({s.id: {"title": s.title, "description": s.description, "approximation": s.approximation,
                              "max_ulp": s.max_ulp, "rules": [_rule_record(r) for r in s.rules]}
                       for s in sets.values()},
                      sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        for s in sets.values():
            click.echo(f"{click.style(s.id, bold=True)}: {s.title}")
            for r in s.rules:
                click.echo(f"  {r.id}  {r.name:28} {r.summary}")
        click.echo("\n`kpatch rules RULE_OR_SET` explains one.")
        return
    if rule in sets:
        s = sets[rule]
        if as_json:
            json.dump([_rule_record(r) for r in s.rules], sys.stdout, indent=2)
            sys.stdout.write("\n")
            return
        click.echo(f"{click.style(s.id, bold=True)}: {s.title}\n\n{s.description}\n")
        if s.approximation:
            click.echo(f"bound: max_ulp = {s.max_ulp} (f32 ulps per result word; "
                       "`kpatch verify --emulate` checks it)\n")
        for r in s.rules:
            click.echo(f"{r.id} {r.name}: {r.summary}")
        return
    for s in sets.values():
        for r in s.rules:
            if rule in (r.id, r.name):
                if as_json:
                    json.dump(_rule_record(r), sys.stdout, indent=2)
                    sys.stdout.write("\n")
                    return
                click.echo(f"{click.style(f'{r.id} {r.name}', bold=True)} (set {s.id})")
                click.echo(f"matches: {_rule_record(r)['matches']}")
                click.echo(f"does: {'; '.join(_actions(r))}")
                if s.approximation:
                    click.echo(f"bound: max_ulp = {s.max_ulp} (approximation {s.id})")
                click.echo(f"\n{r.summary}\n\n{r.explain}")
                return
    raise click.UsageError(f"no rule or rule set {rule!r} (see `kpatch rules`)")
