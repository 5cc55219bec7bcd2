#!/usr/bin/env python3
"""Reads a capture's exports with standard readers that share no code with mdfan, and prints what they hold in
the form of `mdfan-capture report`, so CI can compare the two line by line.

    python3 ops/check-exports.py FILE.parquet [FILE.dbn[.zst]]

Parquet (pyarrow): `capture rows=N first_ts_recv_ns=.. last_ts_recv_ns=.. first_ts_event_ns=..
last_ts_event_ns=..` (first and last in capture order, as the report gives them for the venue's records), then
`capture kind=Name records=N size=S` per kind (the session's own records are not rows). DBN (databento-dbn, the zstd frame read with
zstandard): `dbn dataset=.. schema=.. records=N first_ts_recv_ns=.. last_ts_recv_ns=.. symbols=SYMBOL:ID,..`.
Needs pyarrow (and databento-dbn, zstandard for a DBN file) from PyPI.
"""
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq

SESSION_KINDS = ["heartbeat", "end_of_stream", "snapshot_begin", "snapshot_end"]


def camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def parquet_lines(path: str) -> list:
    t = pq.read_table(path, columns=["kind", "size", "ts_recv", "ts_event"])
    venue = t.filter(pc.invert(pc.is_in(t["kind"], value_set=__import__("pyarrow").array(SESSION_KINDS))))
    ns = lambda col, i: venue[col].cast("int64")[i].as_py() if venue.num_rows else 0
    out = [
        f"capture rows={t.num_rows} first_ts_recv_ns={ns('ts_recv', 0)} last_ts_recv_ns={ns('ts_recv', -1)} "
        f"first_ts_event_ns={ns('ts_event', 0)} last_ts_event_ns={ns('ts_event', -1)}"
    ]
    by_kind = t.group_by("kind").aggregate([("size", "count"), ("size", "sum")])
    for kind, n, size in sorted(zip(*(by_kind[c].to_pylist() for c in ["kind", "size_count", "size_sum"]))):
        out.append(f"capture kind={camel(kind)} records={n} size={size}")
    return out


def dbn_lines(path: str) -> list:
    import databento_dbn

    raw = open(path, "rb").read()
    if path.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
    dec = databento_dbn.DBNDecoder()
    dec.write(raw)
    recs = dec.decode()
    meta, mbo = recs[0], [r for r in recs[1:] if isinstance(r, databento_dbn.MBOMsg)]
    symbols = ",".join(f"{s}:{iv['symbol']}" for s, ivs in sorted(meta.mappings.items()) for iv in ivs)
    first, last = (mbo[0].ts_recv, mbo[-1].ts_recv) if mbo else (0, 0)
    return [
        f"dbn dataset={meta.dataset} schema={meta.schema} records={len(mbo)} first_ts_recv_ns={first} "
        f"last_ts_recv_ns={last} symbols={symbols}"
    ]


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print("usage: check-exports.py FILE.parquet [FILE.dbn[.zst]]", file=sys.stderr)
        return 2
    for line in parquet_lines(sys.argv[1]) + (dbn_lines(sys.argv[2]) if len(sys.argv) == 3 else []):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
