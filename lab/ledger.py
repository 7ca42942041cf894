"""The ledger verdict: is a run exact?

A deduction commits one orders row in the same transaction as the stock change, so
after a run three counts must agree: the stock change (initial - final, plus any
restock), the orders rows, and the "deducted" answers the clients saw; and, where the
client kept them, the answered order ids and the rows' ids name the same orders, one to
one. This module is the one place that says so. Every tool of loadtest/ and the nemesis
call judge() (or reconcile() for the ids alone); loadtest/reconcile.c is the same
comparison in C for stockload, checked against the same cases
(tests/lab/ledger_cases.json).

Everything here is pure: the caller reads the database and the clients' output.
"""

from dataclasses import dataclass, field

# Mismatching ids kept per kind, for a report (RECONCILE_EXAMPLES in reconcile.h).
EXAMPLES = 8

EXACT = "EXACT"
OVERSOLD = "OVERSOLD"
UNDERSOLD = "UNDERSOLD"
NO_OVERSELL = "NO OVERSELL"


@dataclass(frozen=True)
class Reconciliation:
    """The answered order ids against the orders rows' ids (reconcile_report in C)."""

    answers: int
    rows: int
    missing_rows: int  # distinct answered ids that have no row
    unanswered_rows: int  # rows that no answer names
    duplicate_answers: int  # answers naming an id an earlier answer named
    missing_examples: tuple = ()
    unanswered_examples: tuple = ()

    @property
    def ok(self):
        return self.missing_rows + self.unanswered_rows + self.duplicate_answers == 0


def reconcile(answer_ids, row_ids):
    """Compares the order ids of the deducted answers with the ids of the orders rows.

    The examples are the smallest few ids of each kind. Never fails."""
    answers = list(answer_ids)
    rows = set(row_ids)
    seen = set()
    duplicates = 0
    for a in answers:
        if a in seen:
            duplicates += 1
        seen.add(a)
    missing = sorted(seen - rows)
    unanswered = sorted(rows - seen)
    return Reconciliation(
        answers=len(answers),
        rows=len(rows),
        missing_rows=len(missing),
        unanswered_rows=len(unanswered),
        duplicate_answers=duplicates,
        missing_examples=tuple(missing[:EXAMPLES]),
        unanswered_examples=tuple(unanswered[:EXAMPLES]),
    )


def stock_change(initial, final, restocked=0):
    """The units that left the stock: what the orders rows must count."""
    return initial + restocked - final


@dataclass(frozen=True)
class Ledger:
    """What judge() found. verdict is about the stock, ok about the books."""

    initial: int
    final: int
    orders: int
    deducted: int
    verdict: str
    problems: tuple = field(default=())
    reconciliation: Reconciliation = None
    restocked: int = 0
    released: int = 0

    @property
    def ok(self):
        return not self.problems

    @property
    def balanced(self):
        """The stock equation alone: one orders row per unit gone, restocks and the
        units released (cancelled or expired orders, lab/orders.py) counted."""
        return self.orders - self.released == stock_change(self.initial, self.final,
                                                           self.restocked)

    @property
    def oversold(self):
        return max(self.orders - self.released - self.initial, 0)

    @property
    def exact(self):
        """The run is exact: nothing oversold and the books agree."""
        return self.ok and self.verdict != OVERSOLD


def judge(initial, final, orders, deducted, *, negative=None, products=1, restocked=0,
          lost=0, lossy=False, answer_ids=None, row_ids=None, released=0):
    """Judges one run on one product (or, with products > 1, summed over several).

    initial, final: the stock (summed over the products) before and after;
    orders: the orders rows of the run's products; deducted: the "deducted" answers the
    clients saw; negative: how many products ended below 0 (final < 0 when None, which
    is right for one product); restocked: units added during the run; released: the
    orders rows among ORDERS whose unit came back (cancelled or expired reservations):
    the stock change counts the others, stock = initial + restocks - held rows.
    lossy: a fault may have destroyed answers after their commit, so the clients may
    have seen fewer deductions than were made, by at most lost (the answers that leave
    it open: transport errors, 502/504/500); otherwise deducted must equal orders.
    answer_ids, row_ids: when both are given, they must reconcile one to one.

    The verdict: OVERSOLD when a product went below 0; EXACT when the stock ran out to
    exactly 0 with one order per unit; NO OVERSELL when several products were drawn at
    random and some kept units; UNDERSOLD otherwise (units left on one product, or
    units gone without orders)."""
    if negative is None:
        negative = 1 if final < 0 else 0
    problems = []
    change = stock_change(initial, final, restocked)
    held = orders - released
    if held != change:
        problems.append(f"partial deductions: {held} orders rows hold a unit, but the stock "
                        f"went from {initial} to {final}"
                        + (f" with {restocked} restocked" if restocked else "")
                        + (f" ({released} released)" if released else ""))
    if lossy:
        if not deducted <= orders <= deducted + lost:
            problems.append(f"expected deducted ({deducted}) <= orders ({orders}) <= "
                            f"deducted + lost ({deducted + lost})")
    else:
        if deducted != orders:
            problems.append(f"{deducted} deducted answers, but {orders} orders rows")
        if lost:
            problems.append(f"{lost} answers were lost (transport errors, 502/504/500 unknown)")
    rec = None
    if answer_ids is not None and row_ids is not None:
        rec = reconcile(answer_ids, row_ids)
        if rec.missing_rows:
            problems.append(f"{rec.missing_rows} deducted answers name no orders row "
                            f"(e.g. {list(rec.missing_examples)})")
        if rec.duplicate_answers:
            problems.append(f"order ids were answered more than once ({rec.duplicate_answers} "
                            f"answers repeat one)")
        if rec.unanswered_rows and not lossy:
            problems.append(f"{rec.unanswered_rows} orders rows have no deducted answer "
                            f"(e.g. {list(rec.unanswered_examples)})")
    if negative > 0:
        verdict = OVERSOLD
    elif final == 0 and held == change:
        verdict = EXACT
    elif products > 1 and held == change:
        verdict = NO_OVERSELL
    else:
        verdict = UNDERSOLD
    return Ledger(initial=initial, final=final, orders=orders, deducted=deducted,
                  verdict=verdict, problems=tuple(problems), reconciliation=rec,
                  restocked=restocked, released=released)
