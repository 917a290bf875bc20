"""Rule files are parsed and validated once per process while their bytes
stay the same (issue 14: ``apply --db`` chose its rule sets once per code
object, reading and checking every built-in rule file each time); a file
whose bytes changed -- even to the same size -- is read again."""

from __future__ import annotations

from kpatch.rewrite import patcher, rules

RULE = ('[set]\nid="mine"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\nsummary="s"\n'
        'explain="e"\nmatch.finding="VMEMtoScalarWriteHazard"\ninsert_before=[{op="s_nop"}]\n')


def _count_reads(monkeypatch) -> list[str]:
    """The rule files parsed and validated from now on (their paths)."""
    paths: list[str] = []
    real = rules._rule_set

    def spy(path, *a, **k):
        paths.append(path)
        return real(path, *a, **k)

    monkeypatch.setattr(rules, "_rule_set", spy)
    return paths


def test_choosing_rule_sets_again_reads_no_rule_file(monkeypatch):
    patcher.select_rule_sets("override")  # (whatever an earlier test left: now read)
    reads = _count_reads(monkeypatch)
    first = patcher.select_rule_sets("override")
    again = patcher.select_rule_sets("override")
    assert reads == []
    assert [s.id for s in first] == [s.id for s in again] and first[0] is again[0]


def test_a_changed_file_is_read_again(tmp_path, monkeypatch):
    p = tmp_path / "mine.toml"
    p.write_text(RULE)
    reads = _count_reads(monkeypatch)
    a = rules.load_file(str(p))
    assert rules.load_file(str(p)) is a and reads == [str(p)]
    p.write_text(RULE.replace('summary="s"', 'summary="z"'))  # same size, other bytes
    b = rules.load_file(str(p))
    assert reads == [str(p), str(p)]
    assert a.rules[0].summary == "s" and b.rules[0].summary == "z"
