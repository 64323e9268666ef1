"""The accounting dict (`loader.accounting()`) as a table: per phase and source, delivered vs the recipe."""

from __future__ import annotations

from shardkit.units import human_count


def accounting_table(acct: dict) -> str:
    rows = [("phase", "source", "tokens", "target", "weight", "achieved", "error", "skipped")]
    for p in acct["phases"]:
        for name, s in p["sources"].items():
            target = "-" if s["target_tokens"] is None else human_count(s["target_tokens"])
            rows.append((p["name"], name, human_count(s["tokens"]), target, f"{s['weight']:.4g}",
                         f"{s['proportion']:.4f}", f"{s['error_tokens']:+,.0f}", human_count(s["skipped_tokens"])))
    rows.append(("", "", "", "", "", "", "", ""))
    rows.append(("run", "source", "tokens", "target", "epochs", "docs seen", "error", "skipped"))
    for name, s in acct["sources"].items():
        seen = f"{s['documents_seen']:,}/{s['documents']:,}" + ("" if s["documents_seen_exact"] else " (est.)")
        target = "-" if s["target_tokens"] is None else human_count(s["target_tokens"])
        rows.append(("", name, human_count(s["tokens"]), target, f"{s['epochs']:.3f}", seen,
                     f"{s['error_tokens']:+,.0f}", human_count(s["skipped_tokens"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(("  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in
                                       enumerate(zip(r, widths)))).rstrip() for r in rows)
