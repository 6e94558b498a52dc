"""The report's verdict sections: how a verdict is decided (both rules, each with a worked line from this run), the
chamber's verdicts and the instrument station's, and the readings behind the definitive ones.

Why this order inside a section: a reader comes for the verdicts that say something. So the definitive ones come
first, in one table whose every row is drawn in the figure just below it with the same numbers (both from one
report_rows.VerdictRow); the inconclusive ones follow, grouped by class, each class said once in words, each row
with its reason and what would make it definitive (the instrument or the condition), a column left out when no
row of its class has an answer. The station's section gives what the station decided; the claims it leaves
inconclusive are the chamber's tables' rows, where the station's part in each is named, not a second list of them.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from agent.scoring import report_chamber_figures as chamber_figs
from agent.scoring import report_figures as figs
from agent.scoring.report_format import DASH, cell, number, unit_text, verdict_places
from agent.scoring.report_rows import VerdictRow, expanded_text, measurement_text, verdict_row
from agent.scoring.report_run import caveat

Block = tuple
DEFINITIVE = ("pass", "fail")

#: the inconclusive classes in the order a reader meets them (closest to a verdict first), each with what it means
#: and what, in general, would make such a claim definitive
CLASSES: dict[str, tuple[str, str]] = {
    "resolution-limited": ("the comparison's uncertainty c cannot resolve m from the limit",
                           "a smaller uncertainty"),
    "typical-not-guaranteed": ("the datasheet prints only a typical value, which describes the population of parts; "
                               "one unit can neither fail nor confirm it",
                               "a population of units (the fleet rule grades a typical from 5 units: run --fleet)"),
    "no-traceable-reference": ("a decisive condition needs a traceable reference the chamber lacks",
                               "a traceable reference"),
    "unmatched-stimulus": ("a decisive condition is a stimulus or environment the chamber cannot apply",
                           "a way to apply the stimulus"),
    "unmatched-observable": ("a decisive quantity is one the chamber cannot observe", "a way to observe it"),
    "engagement-only": ("the chamber engages the part, but no protocol measures this claim",
                        "a protocol that measures it"),
    "chamber-not-connected": ("the chamber the claim needs was not connected", "the chamber connected"),
}


def definitive_rows(results: list[dict[str, Any]], claims: Mapping[str, Any], label: str = "") -> list[VerdictRow]:
    """The definitive verdicts of `results` with a measured value, as rows: fails first, then by claim id."""
    ordered = sorted(results, key=lambda r: (r.get("verdict") != "fail", str(r.get("claim_id"))))
    return [verdict_row(name, r, claims.get(str(r.get("claim_id"))))
            for name, r in chamber_figs.definitive(ordered, label)]


# ------------------------------------------------------------------------------------------------ the rule
def _u_t(row: VerdictRow, r: dict[str, Any]) -> tuple[str, str, str]:
    """u, t and how t entered c, as the verdict's record gives them (in the claim's unit, its resolution); t from
    the claim when an older record does not carry it."""
    detail, places = r.get("verdict_detail") or {}, verdict_places(r)
    u = number((r.get("measured") or {}).get("u") or detail.get("u"), places=places)
    t = detail.get("tolerance") if detail.get("tolerance") is not None else row.stated.get("t")
    entry = str(detail.get("tolerance_entry") or "")
    how = " (entered as t/√3)" if entry.startswith("rectangular") else ""
    return u, ("0" if t in (None, "0") else str(t)), how


def _worked_bound(row: VerdictRow, r: dict[str, Any]) -> str:
    u, t, how = _u_t(row, r)
    m = number(r["measured"]["value"], places=verdict_places(r))
    if row.semantics == "range":
        d = f"max(low − m, m − high) = max({row.stated['low']} − {m}, {m} − {row.stated['high']})"
    elif row.semantics == "upper_bound":
        d = f"m − high = {m} − {row.stated['high']}"
    else:
        d = f"low − m = {row.stated['low']} − {m}"
    decided = {"pass": "d < −c → pass", "fail": "d > c → fail"}[row.verdict]
    return (f"{row.label}: m = {m} {row.unit}, u = {u} {row.unit}, t = {t}{how} → c = sqrt(u² + t²) = {row.c_text}; "
            f"limits {row.limits} → d = {d} = {row.d_text}; {decided}.")


def _worked_point(row: VerdictRow, r: dict[str, Any]) -> str:
    u, t, how = _u_t(row, r)
    m = number(r["measured"]["value"], places=verdict_places(r))
    relation = "≤ c → pass (compatible)" if row.verdict == "pass" else "> c → fail (not compatible)"
    return (f"{row.label}: s = {row.stated.get('s')} {row.unit}, t = {t} {row.unit}{how}, m = {m} {row.unit}, "
            f"u = {u} {row.unit} → c = sqrt(u² + t²) = {row.c_text}; d = |m − s| = |{m} − {row.stated.get('s')}| = "
            f"{row.d_text} {relation}. The claim's printed band is s ± t = {row.limits}; the rule's is s ± c.")


def rule_blocks(pairs: list[tuple[VerdictRow, dict[str, Any]]], source: str) -> list[Block]:
    """Both rules in words, each with a worked line: from this run's first definitive verdict of its kind, or a
    worked example said to be one when the run has none."""
    bound = next(((row, r) for row, r in pairs if row.semantics in ("range", "upper_bound", "lower_bound")
                  and row.c is not None and row.d is not None and all(k in row.stated for k in (
                      ("low", "high") if row.semantics == "range" else
                      ("high",) if row.semantics == "upper_bound" else ("low",)))), None)
    point = next(((row, r) for row, r in pairs if row.semantics == "point" and "s" in row.stated
                  and row.c is not None), None)
    bound_line = (f"Worked, from this run — {_worked_bound(*bound)}" if bound else
                  "Worked example (no bound verdict in this run): m = 0.37 LSb, u = 0.19 LSb, t = 0 → c = 0.19 LSb; "
                  "limits −1 to 1 LSb → d = max(−1 − 0.37, 0.37 − 1) = −0.63 LSb; d < −c → pass.")
    point_line = (f"Worked, from this run — {_worked_point(*point)}" if point else
                  "Worked example (no point verdict in this run): s = 0 Pa, t = 100 Pa, m = −2.7 Pa, u = 2.5 Pa → "
                  "c = sqrt(2.5² + 100²) = 100.0 Pa; d = |−2.7 − 0| = 2.7 Pa ≤ c → pass (compatible).")
    return [
        ("h2", "How a verdict is decided"),
        ("p", "Every measurement is written m ± U (k = …): m and its own expanded uncertainty U = k·u for 95 % "
              "coverage, k from its degrees of freedom, at the places the verdict reported m with. The rule "
              "itself works at the level of standard uncertainties: c = sqrt(u² + t²) combines the measurement's u "
              f"with the claim's stated tolerance t (0 when none is printed). The limits are the claim's, from {source}."),
        ("ul", [
            "**Bound claims** (a range, a maximum or minimum rating): d = the signed distance by which m violates "
            "the claim (negative inside, by the margin). Pass when d < −c (the claim holds by more than c), fail "
            "when d > c, inconclusive otherwise; the guard band ±c around each limit is closed, so |d| = c is "
            "inconclusive (ILAC-G8:2019 §4.2.3 with w = c).",
            f"  - {bound_line}",
            "**Point claims** (an accuracy printed as s ± t): the VIM 2.47 compatibility test. d = |m − s|; pass "
            "(compatible) when d ≤ c, fail when d > c; never inconclusive on its numbers. Since c includes t, the "
            "band s ± c is about the printed band s ± t widened by u.",
            f"  - {point_line}",
            "**A typical value with no printed Min./Max.** is no limit: inconclusive (typical-not-guaranteed) on "
            "one unit, with the deviation m − typical and its U.",
        ]),
        ("p", "Because the rule decides at c and the figures draw U = k·u (about 2u), a pass whose margin lies "
              "between c and U shows its U reaching past the limit; the figure says so on that row. An unmatched "
              "decisive condition makes a verdict inconclusive whatever the numbers say."),
    ]


# ------------------------------------------------------------------------------------------------ tables
def definitive_table(rows: list[VerdictRow], records: Mapping[str, dict[str, Any]]) -> Block:
    """claim | verdict | m ± U (k) | limits | d | c | decision: the numbers each figure row repeats, and the
    comparison that decided (the verdict's reason says the same in words: 'inside the claim by d, more than c')."""
    return ("table", ["claim", "verdict", "m ± U (95 %)", "limits", "distance d", "c", "decision"],
            [[row.label, row.verdict, row.measured, row.limits, row.d_text, row.c_text,
              decision_text(row, records[row.label])] for row in rows])


def decision_text(row: VerdictRow, r: dict[str, Any]) -> str:
    """The comparison that decided a definitive verdict ('d < −c'), what the reader should know beside it (U past a
    limit, a unit conversion the verdict noted) and the weak-pass caveat in full."""
    if row.semantics == "point":
        words = "|m − s| ≤ c: compatible" if row.verdict == "pass" else "|m − s| > c: not compatible"
    else:
        words = "d < −c" if row.verdict == "pass" else "d > c"
    notes = [words]
    if row.u_beyond_limits and row.verdict == "pass":
        notes.append("U reaches past a limit: the rule decides at c")
    notes += [str(n) for n in (r.get("verdict_detail") or {}).get("notes") or []]
    return "; ".join(notes) + (". **Weak pass: see its caveat under the table.**" if caveat(r) else "")


def caveat_blocks(rows: list[VerdictRow], records: Mapping[str, dict[str, Any]]) -> list[Block]:
    """The weak-pass caveats of a definitive table in full, right under it, each named by its claim."""
    notes = [f"{row.label}: **caveat — {caveat(records[row.label])}**" for row in rows if caveat(records[row.label])]
    return [("ul", notes)] if notes else []


_LONG_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d{9,}")


def reason_text(r: dict[str, Any]) -> str:
    """The verdict's reason in full, with its weak-pass caveat in full beside it. Its numbers are the verdict's
    own, except that a c carried to 50 digits for the exact decision is written at the verdict's resolution, and
    its unit is spelt as the rest of the report spells it."""
    text = str(r.get("reason", "")) or DASH
    places = verdict_places(r)
    text = _LONG_DECIMAL.sub(lambda m: number(m.group(0), places=places if places is not None else 3), text)
    unit = str((r.get("measured") or {}).get("unit") or r.get("claim_unit") or "")
    if unit and unit_text(unit) != unit:
        text = re.sub(rf"(?<=\d ){re.escape(unit)}\b", unit_text(unit), text)
    note = caveat(r)
    return f"{text} **Caveat — {note}**" if note else text


def what_would_decide(r: dict[str, Any], env: dict[str, Any] | None, station: dict[str, Any] | None) -> str:
    """What would make inconclusive verdict `r` definitive: the instrument or the condition, from the station's
    envelope entry `env` and its result `station` for the claim when there are; '' when nothing is known beyond
    what the class says."""
    cls = str(r.get("class") or "")
    instruments = ", ".join((env or {}).get("instruments_present") or (env or {}).get("instruments_needed") or [])
    if station is not None and station is not r:
        if station.get("verdict") in DEFINITIVE:
            return f"the station's {instruments or 'instruments'} (with the station: {station['verdict']}, below)"
        if station.get("class") and station.get("class") != cls:
            more = what_would_decide(station, env, None) or CLASSES.get(str(station["class"]), ("", ""))[1]
            return (f"with the station's {instruments or 'instruments'}: still inconclusive ({station['class']}); "
                    f"then {more}")
    if cls == "resolution-limited":
        pre = r.get("precheck") or {}
        if pre.get("reason"):
            return f"a smaller uncertainty ({pre['reason']})"
        if r.get("combined_uncertainty") is not None and r.get("distance") is not None:
            p, unit = verdict_places(r), unit_text((r.get("measured") or {}).get("unit"))
            return (f"a smaller uncertainty: c = {number(r['combined_uncertainty'], places=p)} {unit} must fall below "
                    f"the margin |d| = {number(abs(float(r['distance'])), places=p)} {unit}")
    if cls in ("typical-not-guaranteed", "chamber-not-connected"):
        return CLASSES[cls][1]
    if env:
        component = env.get("component") or "part"
        if env.get("would_need"):
            return "instruments: " + ", ".join(f"{k} wired to the {component}" for k in env["would_need"])
        if env.get("blocking_conditions"):
            return f"realising {', '.join(env['blocking_conditions'])} (no instrument of this product does)"
        if env.get("instruments_needed") and not env.get("instrument_protocol"):
            return f"{', '.join(env['instruments_needed'])} and an instrument protocol (not in this product yet)"
    unmatched = r.get("unmatched_conditions") or []
    if unmatched and cls in CLASSES:
        return f"{CLASSES[cls][1]}: {', '.join(unmatched)}"
    return ""


def inconclusive_blocks(results: list[dict[str, Any]], envelope: Mapping[str, dict[str, Any]],
                        station: Mapping[str, dict[str, Any]], where: str) -> list[Block]:
    """The inconclusive verdicts grouped by class: an h3 per class with what it means, then claim | reason | what
    would make it definitive (the column only when a row of the class has an answer)."""
    rows = [r for r in results if r.get("verdict") == "inconclusive"]
    if not rows:
        return []
    by_class: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: str(r.get("claim_id"))):
        by_class.setdefault(str(r.get("class") or "unclassified"), []).append(r)
    order = [c for c in CLASSES if c in by_class] + sorted(set(by_class) - set(CLASSES))
    blocks: list[Block] = [("p", f"{where}: {len(rows)} inconclusive, by class — "
                                 + ", ".join(f"{c} {len(by_class[c])}" for c in order) + ".")]
    for cls in order:
        group = by_class[cls]
        meaning, need = CLASSES.get(cls, ("no class recorded", ""))
        answers = [what_would_decide(r, envelope.get(str(r["claim_id"])), station.get(str(r["claim_id"])))
                   for r in group]
        blocks += [("h3", f"Inconclusive: {cls} ({len(group)})"),
                   ("p", f"{meaning[0].upper()}{meaning[1:]}." + (f" In general, what would decide it: {need}." if need
                                                                  else ""))]
        if any(answers):
            blocks.append(("table", ["claim", "reason", "would become definitive with"],
                           [[r["claim_id"], reason_text(r), a or DASH] for r, a in zip(group, answers)]))
        else:
            blocks.append(("table", ["claim", "reason"], [[r["claim_id"], reason_text(r)] for r in group]))
    return blocks


# ------------------------------------------------------------------------------------------------ sections
def chamber_envelope(res: list[dict[str, Any]]) -> str | None:
    """The chamber-only envelope: definitive verdicts on the seed's packaged claims and on the chamber's other parts
    (protocols/data/chamber_parts), when those were graded; None when only the packaged set was."""
    try:
        from protocols.claim_sources import load_checked_claims

        packaged = set(load_checked_claims(None))
    except Exception:  # the report renders whatever is present; without the package it cannot split the counts
        return None
    other = [r for r in res if r.get("claim_id") not in packaged]
    if not other:
        return None
    seed = [r for r in res if r.get("claim_id") in packaged]
    d_seed = sum(r.get("verdict") in DEFINITIVE for r in seed)
    d_other = sum(r.get("verdict") in DEFINITIVE for r in other)
    parts = sorted({str(r["component"]) for r in other if r.get("component")})
    return (f"Chamber-only envelope: {d_seed + d_other} definitive verdicts — {d_seed} of the {len(seed)} packaged "
            f"claims and {d_other} of the {len(other)} claims outside it"
            + (f" ({', '.join(parts)})." if parts else "."))


def _counts(values: Any) -> str:
    from collections import Counter

    return ", ".join(f"{k} {v}" for k, v in sorted(Counter(values).items(), key=lambda kv: str(kv[0])))


def headline_line(row: VerdictRow, r: dict[str, Any]) -> list[str]:
    line = [f"{row.label}: **{row.verdict}**, {row.measured}; d = {row.d_text}, c = {row.c_text}"]
    note = caveat(r)
    return line + ([f"    - caveat: {note}"] if note else [])


def verdict_figure(rows: list[VerdictRow], figs_dir: Any) -> list[Block]:
    built = chamber_figs.fig_verdicts(rows)
    if built is None:
        return [("p", "No definitive verdict to draw (no pass or fail with a measured value).")]
    fig, data = built
    return [("fig", "Definitive verdicts, one row per claim on its own axis in the claim's unit, with the table's "
                    "numbers: the measured m ± U (its own expanded uncertainty, k stated; colour: verdict), the "
                    "claim's limits (dark ticks, tinted between), and the band the rule decided with — the guard "
                    "band ±c around each limit of a bound claim (orange), or s ± c of a point claim (blue). A bar or "
                    "band narrower than a pixel is in the row's numbers.",
             figs.save(fig, figs_dir / "verdicts.svg", data))]


def chamber_blocks(checks: dict[str, Any] | None, rows: list[VerdictRow], figure: list[Block],
                   station_data: dict[str, Any] | None) -> tuple[list[Block], list[str]]:
    """The chamber's verdicts: definitive (table, then the figure of every definitive verdict), then the
    inconclusive by class; and the headline lines."""
    if checks is None:
        return [("h2", "Chamber verdicts"), ("p", "No chamber verdicts (see Absent inputs).")], []
    res = list(checks.get("results") or [])
    records = {str(r.get("claim_id")): r for r in res}
    own = [row for row in rows if row.label in records]
    station = {str(r.get("claim_id")): r for r in (station_data or {}).get("results") or []}
    envelope = {str(e.get("claim_id")): e for e in (station_data or {}).get("envelope") or []}
    headline = [f"Chamber: {len(res)} claims — " + _counts(r.get("verdict") for r in res)]
    envelope_line = chamber_envelope(res)
    if envelope_line:
        headline.append(envelope_line)
    lines = [x for row in own for x in headline_line(row, records[row.label])]
    others = sorted((r for r in res if r.get("verdict") in ("error",) or (
        r.get("verdict") in DEFINITIVE and str(r.get("claim_id")) not in {row.label for row in own})),
        key=lambda r: str(r.get("claim_id")))
    blocks: list[Block] = [("h2", "Chamber verdicts"), ("h3", f"Definitive ({len(own)})")]
    if own:
        blocks += [definitive_table(own, records), *caveat_blocks(own, records)]
    else:
        blocks.append(("p", "No definitive verdict from the chamber."))
    if envelope_line:
        blocks.append(("p", envelope_line))
    blocks += figure
    if others:
        blocks += [("h3", f"Errors and verdicts without a value ({len(others)})"),
                   ("table", ["claim", "verdict", "reason"],
                    [[r.get("claim_id"), r.get("verdict"), reason_text(r)] for r in others])]
    blocks += inconclusive_blocks(res, envelope, station, "The chamber")
    return blocks, headline + [f"  - {d}" if not d.startswith("    ") else d for d in lines]


def typical_blocks(results: Any) -> list[Block]:
    """The typical-not-guaranteed class, explained where it occurs: a Typ. is not a limit, so one unit cannot fail it."""
    typical = sorted((r for r in results if r.get("class") == "typical-not-guaranteed"), key=lambda r: r["claim_id"])
    rows = []
    for r in typical:
        detail, p = r.get("verdict_detail") or {}, verdict_places(r)
        unit = unit_text((r.get("measured") or {}).get("unit"))
        rows.append([r["claim_id"], expanded_text(r),
                     f"{number(detail.get('deviation_from_typical'), places=p)} {unit}".strip(),
                     f"{number(detail.get('expanded_uncertainty'), places=p)} {unit}".strip()])
    if not rows:
        return []
    return [("h3", f"Inconclusive with the station: typical-not-guaranteed ({len(rows)})"),
            ("p", "The datasheet prints only a typical value (no Min./Max.). A typical describes the population of "
                  "parts, not a limit each unit must meet, so one unit's deviation from it can neither fail nor "
                  "confirm the claim; the deviation m − typical is given with the U of the comparison (k·c, 95 %). "
                  f"What would decide it: {CLASSES['typical-not-guaranteed'][1]}."),
            ("table", ["claim", "m ± U (95 %)", "m − typical", "U of m − typical (k·c)"], rows)]


def station_blocks(data: dict[str, Any] | None, rows: list[VerdictRow], chamber_ids: set[str],
                   figure: list[Block] | None = None) -> tuple[list[Block], list[str]]:
    """With lab instruments: the definitive verdicts (m ± U, as the figure draws them; `figure` under them when
    there are no chamber verdicts to draw it beside), the typical values, and the claims still inconclusive that
    the chamber's tables do not already hold."""
    if data is None:
        return [], []
    res = {str(r["claim_id"]): r for r in data.get("results") or []}
    envelope = {str(e.get("claim_id")): e for e in data.get("envelope") or []}
    definitive = list(rows)
    mine_records = {row.label: res[row.claim_id] for row in definitive}
    still = [r for cid, r in res.items() if r.get("verdict") == "inconclusive"
             and r.get("class") != "typical-not-guaranteed"]
    blocks: list[Block] = [
        ("h2", "With the instrument station"),
        ("p", f"Station file {data.get('station')}: {len(definitive)} of {len(res)} claims get a definitive verdict "
              "when lab instruments supply the stimulus, observable or reference the chamber lacks; each budget "
              "includes the instrument's certificate uncertainty. Rows marked (station) in the figure above are "
              "definitive only here."),
        ("h3", f"Definitive with the station ({len(definitive)})"),
        *([definitive_table(definitive, mine_records), *caveat_blocks(definitive, mine_records)] if definitive else
          [("p", "No definitive verdict with the station.")]),
        *(figure or []),
        *typical_blocks(res.values()),
    ]
    mine = [r for r in still if str(r["claim_id"]) not in chamber_ids]
    if still:
        held = len(still) - len(mine)
        blocks.append(("p", f"Still inconclusive with the station: {len(still)} claims"
                            + (f"; {'all' if not mine else held} of them in the chamber's inconclusive tables above, "
                               "each with what would make it definitive" if held else "") + "."))
    if mine:
        blocks += inconclusive_blocks(mine, envelope, {}, "The station")
    return blocks, [f"With instruments: {len(definitive)} definitive ("
                    + _counts(r.get("verdict") for r in res.values()) + ")"]


def readings_blocks(definitive: list[tuple[str, dict[str, Any]]], figs_dir: Any) -> list[Block]:
    """The readings each definitive verdict rests on, in the unit the protocol measured in."""
    if not definitive:
        return []
    rows = []
    for label, r in definitive:
        md = r.get("measurement_detail") or {}
        unit = unit_text(md.get("unit"))
        rows.append([label, (md.get("details") or {}).get("reading") or DASH, cell(md.get("n")),
                     measurement_text(md) if md.get("value") is not None else DASH,
                     chamber_figs.readings_text(r) + (f" ({unit})" if unit and chamber_figs.recorded_readings(r)
                                                      else "")])
    blocks: list[Block] = [("h2", "Readings behind the definitive verdicts"),
                           ("p", "Each definitive verdict's measurement as its protocol took it (before any unit "
                                 "conversion to the claim's unit), m ± U with its k, and the individual readings "
                                 "the protocol recorded beside it.")]
    fig = chamber_figs.fig_readings(definitive)
    if fig is not None:
        blocks.append(("fig", "Readings: the measured m ± U (k·u, coloured by verdict) and the recorded readings "
                              "(each barometer's unit mean in its own colour, min / mean / max of a held reading, "
                              "extreme codes or steps), one row per verdict on its own axis in the measured unit; "
                              "verdicts whose protocol recorded no individual readings are in the table only",
                       figs.save(fig, figs_dir / "readings.svg")))
    else:
        blocks.append(("p", "No figure: no definitive verdict's protocol recorded individual readings beside its "
                            "result; the table gives each measurement."))
    blocks.append(("table", ["claim", "signal", "rows n", "as measured m ± U (95 %)", "recorded readings"], rows))
    return blocks
