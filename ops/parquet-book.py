# The final MBO book of each instrument in an `mdfan-capture export --parquet` file, rebuilt with pyarrow alone.
# Usage: python3 ops/parquet-book.py FILE.parquet   (pip install pyarrow)
import json, sys
from collections import defaultdict
import pyarrow.parquet as pq

cols = ["instrument_id", "symbol", "kind", "side", "price", "size", "order_id"]
orders, symbols, row = defaultdict(dict), {}, 0  # instrument_id -> order_id -> [side, price, size]
f = pq.ParquetFile(sys.argv[1])  # a restarted recorder's session begins with its books empty:
restarts = set(json.loads((f.metadata.metadata or {}).get(b"mdfan.restart_rows", b"[]")))
for batch in f.iter_batches(columns=cols):
    for iid, sym, kind, side, price, size, oid in zip(*(batch.column(c).to_pylist() for c in cols)):
        if row in restarts: orders.clear()
        row += 1
        book, symbols[iid] = orders[iid], sym
        if kind in ("add", "modify"): book[oid] = [side, price, size]
        elif kind == "cancel":
            book[oid][2] -= size
            if book[oid][2] == 0: del book[oid]
        elif kind == "clear": book.clear()
px = lambda p: f"{p:.2f}" if p == round(p, 2) else f"{p.normalize():f}"
for iid, book in sorted(orders.items()):
    lv = {s: defaultdict(int) for s in "BA"}
    for side, price, size in book.values(): lv[side][price] += size
    top = lambda s, p: "-" if p is None else f"{px(p)}x{lv[s][p]}"
    bbo = top("B", max(lv["B"], default=None)) + "/" + top("A", min(lv["A"], default=None))
    if book: print(f"{symbols[iid]} instrument_id={iid} orders={len(book)} bbo={bbo}")
