"""`kpatch explain`: what a finding class of `kpatch scan --target` means."""

from __future__ import annotations

import click

from kpatch.analysis.findings import CLASSES, lookup


@click.command("explain")
@click.argument("name", required=False, metavar="[CLASS]")
def explain_cmd(name: str | None) -> None:
    """Explain a finding class of `kpatch scan --target gfx1010`.

    CLASS is a class name (VMEMtoScalarWriteHazard) or code (H002), any
    case.  Without CLASS, list every class with its code, title and the rule
    set that fixes it.  The text says what the class means, why it breaks
    gfx1010 hardware, how it is fixed, and what kpatch cannot verify without
    the GPU.

    Exit status: 0; 2 for an unknown CLASS; 3 on an internal error.
    """
    if name is None:
        width = max(len(c.name) for c in CLASSES)
        for c in CLASSES:
            click.echo(f"{c.code}  {c.name:<{width}}  {c.title}  "
                       f"[{c.rule_set or (f'{c.partly_fixed_by} for some' if c.partly_fixed_by else 'not fixable')}]")
        return
    c = lookup(name)
    if c is None:
        names = ", ".join(x.name for x in CLASSES)
        raise click.UsageError(f"no finding class {name!r}; classes: {names}")
    click.echo(c.explain())
