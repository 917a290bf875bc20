"""Rules as data: the schema of `rules/*.toml`, its loader and validator.

A rule file holds one rule set::

    [set]
    id = "gfx1010-hazards"            # what --rules names
    title = "..."                     # one line
    description = "..."               # what the set does to the hardware
    approximation = true              # optional: the set changes results slightly;
                                      # used only when named with --allow-approx
    max_ulp = 16                      # required with approximation = true: the largest
                                      # difference (f32 ulps per result word) the set claims;
                                      # `kpatch verify --emulate` checks what it measures against it

    [[rule]]
    id = "KH001"                      # stable code, never reused
    name = "vmem-to-scalar-write"     # stable name
    summary = "..."                   # one line
    explain = "..."                   # what it does to the hardware, and what
                                      # kpatch cannot verify without the GPU
    # what it matches: one of
    match.finding = "VMEMtoScalarWriteHazard"        # a class from `kpatch scan --target gfx1010`
                                                     #   (may add match.mnemonic: only findings at
                                                     #   instructions whose mnemonic matches)
    match.mnemonic = "^global_load_"                 # or an instruction pattern (regex, full match)
    match.format = ["FLAT", "MUBUF"]                 #   optional: formats
    match.fields = { glc = 0 }                       #   optional: field values that must hold
    match.exclude = "atomic"                         #   optional: regex on the mnemonic to skip
    match.header = true                              # or the code object itself (header rules;
                                                     #   may add match.finding: the findings the
                                                     #   object-wide action fixes)
    # actions (what the engine performs for the match)
    set = { glc = 1, dlc = 1 }                       # set fields of the matched instruction
    replace = [{ op = "s_nop", simm16 = 0 }]         # replace it by a sequence
    insert_before = [{ op = "s_waitcnt_depctr", simm16 = 0xffe3 }]
    insert_after = [{ op = "s_nop", simm16 = 0 }]
    fix = "opcode-reuse"                             # a named built-in transformation
                                                     #   (kpatch.rewrite.fixnames), alone
    header = { wgp_mode = false }                    # kernel header actions (match.finding: the
                                                     #   kernels with that finding)
    header = { mach = "gfx1010", xnack = "-" }       # object header actions (match.header = true)

What the engine performs, by match (anything else is rejected when the
file is loaded, naming the file, the rule and the key):

* ``match.finding``: ``set``/``replace``/``insert_before``/``insert_after``
  at the finding's instruction, or ``fix``; kernel header actions
  (:data:`kpatch.rewrite.headeractions.HEADER_ACTIONS`, scope ``kernel``) for the
  kernels with the finding - a device function with it is refused;
* ``match.mnemonic``: the same instruction actions at every instruction
  that matches (the first such rule that changes an instruction wins), and
  ``fix`` for the fixes that need nothing but the instruction;
* ``match.header = true``: object header actions (scope ``object``),
  performed on every object the rule set is applied to.

``set`` and ``replace`` both rewrite the instruction and exclude each other;
``fix`` is the whole transformation and takes no other instruction action.
Header keys and values are those of ``HEADER_ACTIONS``.

Instructions in sequences are ``{op = MNEMONIC, FIELD = VALUE, ...}`` with
mnemonics as llvm-objdump prints them; they are built with
:mod:`kpatch.isa.build` and checked by decoding, so a rule that names an
instruction the target lacks is rejected when it is loaded.

Loading validates every key; an invalid file gives one ``FormatError``
naming the file, the rule and the key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib.resources import files

from kpatch.analysis.findings import CLASS_BY_NAME
from kpatch.data import parse_toml, read_bytes
from kpatch.errors import FormatError
from kpatch.rewrite.fixnames import FIX_NAMES, NEEDS_FINDING

MATCH_KINDS = ("finding", "mnemonic", "header")
SEQ_ACTIONS = ("replace", "insert_before", "insert_after")
INSTRUCTION_ACTIONS = ("set", *SEQ_ACTIONS)
MATCH_OPTIONS = ("format", "fields", "exclude")  # refinements of match.mnemonic

_ID = re.compile(r"^K[A-Z]\d{3}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class InstSpec:
    """One instruction of a sequence: mnemonic and field values."""

    op: str
    fields: tuple[tuple[str, int], ...] = ()

    def build(self, target: str) -> bytes:
        from kpatch.isa import build

        return build.instruction(self.op, target, **dict(self.fields))


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    summary: str
    explain: str
    set_id: str
    match_kind: str  # finding | mnemonic | header
    finding: str | None = None
    mnemonic: re.Pattern | None = None
    formats: tuple[str, ...] = ()
    fields: tuple[tuple[str, int], ...] = ()
    exclude: re.Pattern | None = None
    set_fields: tuple[tuple[str, int], ...] = ()
    replace: tuple[InstSpec, ...] | None = None
    insert_before: tuple[InstSpec, ...] = ()
    insert_after: tuple[InstSpec, ...] = ()
    fix: str | None = None
    header: tuple[tuple[str, object], ...] = ()
    on_object: bool = False  # match.header = true: the rule's object header actions apply to every object

    def header_actions(self, scope: str) -> tuple[tuple[str, object], ...]:
        """The rule's header actions of ``scope`` (``kernel`` or ``object``)."""
        from kpatch.rewrite.headeractions import HEADER_ACTIONS

        return tuple((k, v) for k, v in self.header if HEADER_ACTIONS[k].scope == scope)

    def matches_finding(self, finding, inst) -> bool:
        """True when a finding rule applies to ``finding`` at instruction ``inst`` (None: unknown)."""
        if self.match_kind != "finding" or finding.cls != self.finding:
            return False
        if self.mnemonic is None:
            return True
        return inst is not None and not inst.is_unknown and bool(self.mnemonic.fullmatch(inst.mnemonic))

    def matches_instruction(self, inst) -> bool:
        """True when an instruction-pattern rule applies to ``inst`` (decoded Instruction)."""
        if self.match_kind != "mnemonic" or inst.is_unknown:
            return False
        if self.formats and inst.format not in self.formats:
            return False
        if not self.mnemonic.fullmatch(inst.mnemonic):
            return False
        if self.exclude is not None and self.exclude.search(inst.mnemonic):
            return False
        f = inst.fields
        return all(f.get(k) == v for k, v in self.fields)


@dataclass
class RuleSet:
    id: str
    title: str
    description: str
    path: str
    rules: list[Rule] = field(default_factory=list)
    approximation: bool = False  # results change slightly: only with --allow-approx
    max_ulp: int | None = None  # an approximation's claimed bound, f32 ulps per result word


def _err(path: str, where: str, reason: str) -> FormatError:
    return FormatError(f"{where}: {reason}", os.path.basename(path))


def _seq(path: str, where: str, value) -> tuple[InstSpec, ...]:
    if not isinstance(value, list) or not value:
        raise _err(path, where, "must be a non-empty list of {op = MNEMONIC, FIELD = VALUE} tables")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("op"), str):
            raise _err(path, f"{where}[{i}]", "needs op = MNEMONIC")
        fields = []
        for k, v in item.items():
            if k == "op":
                continue
            if not isinstance(v, int) or isinstance(v, bool):
                raise _err(path, f"{where}[{i}].{k}", "field values must be integers")
            fields.append((k, v))
        out.append(InstSpec(item["op"], tuple(fields)))
    return tuple(out)


def _int_table(path: str, where: str, value) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict):
        raise _err(path, where, "must be a table of FIELD = INTEGER")
    for k, v in value.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise _err(path, f"{where}.{k}", "must be an integer")
    return tuple(value.items())


def _regex(path: str, where: str, value) -> re.Pattern:
    if not isinstance(value, str):
        raise _err(path, where, "must be a regular expression string")
    try:
        return re.compile(value)
    except re.error as e:
        raise _err(path, where, f"bad regular expression: {e}") from None


def _rule(path: str, set_id: str, i: int, raw: dict) -> Rule:
    """One ``[[rule]]`` table checked and read: its names, what it matches
    and what it does."""
    where = _checked_names(path, f"rule[{i}]", raw)
    match = raw.get("match")
    if not isinstance(match, dict):
        raise _err(path, f"{where}.match", "is required (a table)")
    kind = _match_kind(path, where, match)
    kw: dict = {"id": raw["id"], "name": raw["name"], "summary": raw["summary"].strip(),
                "explain": raw["explain"].strip(), "set_id": set_id, "match_kind": kind,
                "on_object": match.get("header") is True}
    kw.update(_match_terms(path, where, kind, kw["on_object"], match))
    kw.update(_actions(path, where, kind, kw["on_object"], raw))
    return Rule(**kw)


def _checked_names(path: str, where: str, raw) -> str:
    """Check a rule's keys and its id, name, summary and explanation; return
    how errors name it from then on (``rule ID``)."""
    if not isinstance(raw, dict):
        raise _err(path, where, "must be a table")
    known = {"id", "name", "summary", "explain", "match", "set", "fix", "header", *SEQ_ACTIONS}
    for k in raw:
        if k not in known:
            raise _err(path, f"{where}.{k}", f"unknown key (known: {', '.join(sorted(known))})")
    for k in ("id", "name", "summary", "explain"):
        if not isinstance(raw.get(k), str) or not raw[k].strip():
            raise _err(path, f"{where}.{k}", "is required (a non-empty string)")
    where = f"rule {raw['id']}"
    if not _ID.match(raw["id"]):
        raise _err(path, f"{where}.id", "must look like K<letter><3 digits>, e.g. KH001")
    if not _NAME.match(raw["name"]):
        raise _err(path, f"{where}.name", "must be lowercase words joined by '-'")
    return where


def _match_kind(path: str, where: str, match: dict) -> str:
    """Which of :data:`MATCH_KINDS` the ``match`` table is (exactly one), its
    keys checked."""
    for k in match:
        if k not in (*MATCH_KINDS, *MATCH_OPTIONS):
            raise _err(path, f"{where}.match.{k}", "unknown key")
    if "header" in match and match["header"] is not True:
        raise _err(path, f"{where}.match.header", "must be true")
    if "finding" in match:
        kind = "finding"
    elif "mnemonic" in match:
        kind = "mnemonic"
    elif "header" in match:
        kind = "header"
    else:
        raise _err(path, f"{where}.match", f"needs exactly one of {', '.join(MATCH_KINDS)}")
    if kind == "mnemonic" and "header" in match:
        raise _err(path, f"{where}.match", f"needs exactly one of {', '.join(MATCH_KINDS)} "
                   f"(match.header goes with match.finding only)")
    if kind != "mnemonic":
        for k in MATCH_OPTIONS:
            if k in match:
                raise _err(path, f"{where}.match.{k}", "only refines match.mnemonic rules "
                           "(a finding rule with match.mnemonic matches by mnemonic only)")
    return kind


def _match_terms(path: str, where: str, kind: str, on_object: bool, match: dict) -> dict:
    """The Rule fields of what it matches: the finding class, or the
    mnemonic pattern with its format, field and exclusion refinements."""
    kw: dict = {}
    if kind == "finding":
        if not isinstance(match["finding"], str):
            raise _err(path, f"{where}.match.finding", "must be a finding class name")
        if match["finding"] not in CLASS_BY_NAME:  # (a typo would make a rule that never applies)
            raise _err(path, f"{where}.match.finding", f"{match['finding']!r} is no finding class kpatch knows "
                       f"(`kpatch explain` lists them)")
        kw["finding"] = match["finding"]
        if "mnemonic" in match:
            if on_object:
                raise _err(path, f"{where}.match.mnemonic", "a rule for the code object "
                           "(match.header = true) matches no instruction")
            kw["mnemonic"] = _regex(path, f"{where}.match.mnemonic", match["mnemonic"])
    elif kind == "mnemonic":
        kw["mnemonic"] = _regex(path, f"{where}.match.mnemonic", match["mnemonic"])
        fmts = match.get("format", [])
        if isinstance(fmts, str):
            fmts = [fmts]
        if not isinstance(fmts, list) or not all(isinstance(x, str) for x in fmts):
            raise _err(path, f"{where}.match.format", "must be a format name or a list of them")
        kw["formats"] = tuple(fmts)
        if "fields" in match:
            kw["fields"] = _int_table(path, f"{where}.match.fields", match["fields"])
        if "exclude" in match:
            kw["exclude"] = _regex(path, f"{where}.match.exclude", match["exclude"])
    return kw


def _actions(path: str, where: str, kind: str, on_object: bool, raw: dict) -> dict:
    """The Rule fields of what it does (set, the instruction sequences, fix,
    header), checked to be something kpatch can perform for that match."""
    if not any(k in raw for k in ("set", "fix", "header", *SEQ_ACTIONS)):
        raise _err(path, where, "has no action (set, replace, insert_before, insert_after, fix, header)")
    _check_performable(path, where, kind, on_object, raw)
    kw: dict = {}
    if "set" in raw:
        kw["set_fields"] = _int_table(path, f"{where}.set", raw["set"])
    for a in SEQ_ACTIONS:
        if a in raw:
            kw[a] = _seq(path, f"{where}.{a}", raw[a])
    if "fix" in raw:
        kw["fix"] = raw["fix"]
    if "header" in raw:
        kw["header"] = tuple(raw["header"].items())
    return kw


def _check_performable(path: str, where: str, kind: str, on_object: bool, raw: dict) -> None:
    """Reject every action the engine does not perform for this match (see the module docstring)."""
    from kpatch.rewrite.headeractions import HEADER_ACTIONS, header_problem

    inst = [a for a in INSTRUCTION_ACTIONS if a in raw]
    if on_object or kind == "header":
        for a in (*inst, "fix"):
            if a in raw:
                raise _err(path, f"{where}.{a}", "a rule for the code object (match.header = true) "
                           "only takes header actions")
    if "set" in raw and "replace" in raw:
        raise _err(path, f"{where}.set", "set and replace both rewrite the matched instruction: use one")
    if "fix" in raw:
        if inst:
            raise _err(path, f"{where}.{inst[0]}", "a fix is the whole transformation of the instruction: "
                       "it takes no set, replace, insert_before or insert_after")
        fix = raw["fix"]
        if fix not in FIX_NAMES:
            raise _err(path, f"{where}.fix", f"unknown fix {fix!r} (known: {', '.join(FIX_NAMES)})")
        if kind == "mnemonic" and fix in NEEDS_FINDING:
            raise _err(path, f"{where}.fix", f"{fix} works from what the analysis found (a finding), "
                       f"so it needs match.finding, not match.mnemonic")
    if "header" not in raw:
        return
    h = raw["header"]
    if not isinstance(h, dict) or not h:
        raise _err(path, f"{where}.header", "must be a non-empty table")
    if kind == "mnemonic":
        raise _err(path, f"{where}.header", "header actions go with match.finding (kernel actions) or "
                   "match.header = true (object actions), not match.mnemonic")
    for k, v in h.items():
        why = header_problem(k, v)
        if why:
            raise _err(path, f"{where}.header.{k}", why)
        scope = HEADER_ACTIONS[k].scope
        if scope == "object" and not on_object:
            raise _err(path, f"{where}.header.{k}", f"{k} changes the whole code object: the rule needs "
                       "match.header = true")
        if scope == "kernel" and (on_object or kind != "finding"):
            raise _err(path, f"{where}.header.{k}", f"{k} is done for the kernels with the rule's finding: "
                       "the rule needs match.finding (without match.header)")


#: path -> (the file's bytes, the RuleSet parsed from exactly those bytes):
#: a rule file is parsed and validated once per process while its contents
#: stay the same (``apply --db`` patches every code object with the same
#: rules).  The sets are shared: not to be changed.
_LOADED: dict[str, tuple[bytes, RuleSet]] = {}


def load_file(path: str, build_sequences: bool = True) -> RuleSet:
    """Load and validate one rule file; FormatError names the file, rule and key.
    A file whose bytes are those of a file read before gives the same set.

    ``build_sequences=False`` skips building the instructions the rules
    insert (:func:`_check_sequences`, which loads the ISA tables): only for
    listing the built-in rules, which the tests build and every patching
    run builds again.  Such a set is not kept for later loads."""
    raw = read_bytes(path)
    got = _LOADED.get(path)
    if got is not None and got[0] == raw:
        return got[1]
    rs = _rule_set(path, parse_toml(raw, os.path.basename(path)), build_sequences)
    if build_sequences:
        _LOADED[path] = (raw, rs)
    return rs


def _rule_set(path: str, doc: dict, build_sequences: bool = True) -> RuleSet:
    """The rule set the TOML document ``doc`` of the file ``path`` describes, validated."""
    head = doc.get("set")
    if not isinstance(head, dict) or not isinstance(head.get("id"), str):
        raise _err(path, "[set]", "needs id = NAME")
    for k in ("title", "description"):
        if not isinstance(head.get(k), str):
            raise _err(path, f"[set].{k}", "is required (a string)")
    rules = doc.get("rule", [])
    if not isinstance(rules, list) or not rules:
        raise _err(path, "[[rule]]", "a rule set needs at least one rule")
    if not isinstance(head.get("approximation", False), bool):
        raise _err(path, "[set].approximation", "must be true or false")
    bound = head.get("max_ulp")
    if head.get("approximation", False):
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
            raise _err(path, "[set].max_ulp", "an approximation states its bound: an integer >= 0 "
                       "(f32 ulps per result word)")
    elif bound is not None:
        raise _err(path, "[set].max_ulp", "only an approximation (approximation = true) has a bound")
    rs = RuleSet(head["id"], head["title"].strip(), head["description"].strip(), path,
                 approximation=head.get("approximation", False), max_ulp=bound)
    seen: set[str] = set()
    for i, raw in enumerate(rules):
        r = _rule(path, rs.id, i, raw)
        for key in (r.id, r.name):
            if key in seen:
                raise _err(path, f"rule {r.id}", f"duplicate id or name {key!r}")
            seen.add(key)
        if build_sequences:
            _check_sequences(path, r)
        rs.rules.append(r)
    return rs


def _check_sequences(path: str, r: Rule, target: str = "gfx1010") -> None:
    """Build every instruction a rule inserts, for the hardware the code is made safe for."""
    from kpatch.errors import KpatchError

    for action in SEQ_ACTIONS:
        for i, spec in enumerate(getattr(r, action) or ()):
            try:
                spec.build(target)
            except KpatchError as e:
                raise _err(path, f"rule {r.id}.{action}[{i}]", f"{spec.op}: {e.reason}") from None


def builtin_dir() -> str:
    """Directory of the built-in rule files (shipped in the package as kpatch/rules_data)."""
    try:
        return str(files("kpatch.rules_data"))
    except ModuleNotFoundError:  # running from a source tree that was not installed
        return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "rules")


def load_all(extra_paths: list[str] = (), build_builtin: bool = True) -> dict[str, RuleSet]:
    """Built-in rule sets plus user rule files (a user set may not reuse a built-in id).

    ``build_builtin=False`` (`kpatch rules`) does not build the built-in
    rules' instruction sequences (:func:`load_file`); a user file's are
    always built."""
    sets: dict[str, RuleSet] = {}
    d = builtin_dir()
    paths = [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".toml")] if os.path.isdir(d) else []
    for p in [*paths, *extra_paths]:
        rs = load_file(p, build_sequences=build_builtin or p in extra_paths)
        if rs.id in sets:
            raise FormatError(f"rule set id {rs.id!r} is already defined by {os.path.basename(sets[rs.id].path)}",
                              os.path.basename(p))
        sets[rs.id] = rs
    ids: dict[str, str] = {}
    for rs in sets.values():
        for r in rs.rules:
            if r.id in ids:
                raise FormatError(f"rule id {r.id} is used by both {ids[r.id]} and {rs.id}", os.path.basename(rs.path))
            ids[r.id] = rs.id
    return sets
