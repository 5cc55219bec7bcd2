#!/usr/bin/env python3
"""Reads an `mdfan-capture export --parquet` file with pyarrow alone and rebuilds its MBO books from the rows:
a check of the file by a reader that shares no code with mdfan, and an example of the columns in use.

    python3 ops/parquet-book.py FILE.parquet [INSTRUMENT_ID]

Prints one line for the file (rows, row groups, gaps, how the capture stopped) and one per instrument with its
final book: orders resting, levels per side, the BBO (price x size), e.g.

    parquet rows=68793 row_groups=1 gaps=0 stop=end_of_stream book=mbo
    instrument=17077 symbol=ESH4 orders=11217 levels_bid=922 levels_ask=565 bbo=4810.00x22/4810.25x28

Book rules (docs/CAPTURE.md, "Parquet"; the record kinds in wire/src/record.rs): add puts an order, modify
replaces its price and size, cancel takes `size` off it (gone at 0), clear empties the instrument's book; trade,
fill and the other kinds change nothing. Needs pyarrow (pip install pyarrow).
"""
import json
import sys
from collections import defaultdict
from decimal import Decimal

import pyarrow.parquet as pq


def price(p: Decimal) -> str:
    """A price with at least two decimals and no trailing zeros past them (4810.25, 0.0001)."""
    text = format(p.normalize(), "f")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def level(p, levels) -> str:
    return "-" if p is None else f"{price(p)}x{levels[p]}"


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    only = int(sys.argv[2]) if len(sys.argv) == 3 else None
    f = pq.ParquetFile(sys.argv[1])
    meta = {k.decode(): v.decode() for k, v in (f.metadata.metadata or {}).items()}
    gaps = json.loads(meta.get("mdfan.gaps", "[]"))
    print(
        f"parquet rows={f.metadata.num_rows} row_groups={f.num_row_groups} gaps={len(gaps)} "
        f"stop={meta.get('mdfan.stop', '?')} book={meta.get('mdfan.book', '?')}"
    )
    if meta.get("mdfan.book") != "mbo":
        print("parquet-book: only an MBO capture's books are rebuilt here", file=sys.stderr)
        return 0
    orders = defaultdict(dict)  # instrument_id -> order_id -> [side, price, size]
    symbols = {}
    cols = ["instrument_id", "symbol", "kind", "side", "price", "size", "order_id"]
    for batch in f.iter_batches(columns=cols, batch_size=65536):
        for iid, sym, kind, side, price, size, oid in zip(*(batch.column(c).to_pylist() for c in cols)):
            if (only is not None and iid != only) or kind not in ("add", "modify", "cancel", "clear"):
                continue
            book = orders[iid]
            symbols.setdefault(iid, sym)
            if kind in ("add", "modify"):
                book[oid] = [side, price, size]
            elif kind == "cancel":
                o = book.get(oid)
                if o is None:
                    raise SystemExit(f"instrument {iid}: cancel of order {oid}, which is not in the book")
                o[2] -= size
                if o[2] <= 0:
                    del book[oid]
            elif kind == "clear":
                book.clear()
    for iid in sorted(orders):
        levels = {"B": defaultdict(int), "A": defaultdict(int)}
        for side, price, size in orders[iid].values():
            if side in levels:
                levels[side][price] += size
        bid = max(levels["B"], default=None)
        ask = min(levels["A"], default=None)
        print(
            f"instrument={iid} symbol={symbols.get(iid)} orders={len(orders[iid])} levels_bid={len(levels['B'])} "
            f"levels_ask={len(levels['A'])} bbo={level(bid, levels['B'])}/{level(ask, levels['A'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
