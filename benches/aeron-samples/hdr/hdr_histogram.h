/*
 * mdfan's stand-in for HdrHistogram_c's <hdr/hdr_histogram.h>, just what Aeron's cping sample calls
 * (aeron-samples/src/main/c/cping.c: hdr_init, hdr_record_value, hdr_reset, hdr_percentiles_print,
 * hdr_close). Debian packages no HdrHistogram_c, and mdfan-bench wants cping's samples exactly, not
 * HdrHistogram's 3-significant-digit buckets.
 *
 * It keeps an exact count per value: a dense table for 0 .. 2^20 - 1 (values are round trips in ns,
 * so up to 1.05 ms; 4 MiB of uint32_t counts, written once by hdr_init so that no page fault lands
 * on the measured path) and a list of up to 65,536 larger values. A value that fits neither (a
 * negative one, the list full) is counted as dropped. hdr_percentiles_print ignores its ticks,
 * scale and format arguments and prints every distinct value with its count, in the format that
 * mdfan-bench parses (benches/src/aeron_c.rs, `parse_cping`):
 *
 *   #[mdfan-hdr v1: every recorded value in ns, exact]
 *   #[samples=200000 dropped=0 min=164 max=4137210]
 *   <value> <count>          one line per distinct value, ascending
 *   #[p50=190 p99=2730 p99.9=14170 max=4137210]
 *   #[mdfan-hdr end]
 *
 * The API follows HdrHistogram_c's hdr_histogram.h (lowest/highest/significant figures are taken and
 * ignored). Our own code, written for mdfan; no HdrHistogram_c code is used.
 */
#ifndef MDFAN_HDR_HISTOGRAM_STAND_IN_H
#define MDFAN_HDR_HISTOGRAM_STAND_IN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* As HdrHistogram_c's: the output format hdr_percentiles_print is asked for (ignored here). */
typedef enum format_type
{
    CLASSIC,
    CSV
} format_type;

struct hdr_histogram;

/* Allocates and pre-touches the tables; 0, or ENOMEM / EINVAL. */
int hdr_init(
    int64_t lowest_discernible_value,
    int64_t highest_trackable_value,
    int significant_figures,
    struct hdr_histogram **result);

/* Counts one value (ns); false when it was dropped (negative, or the overflow list full). */
bool hdr_record_value(struct hdr_histogram *h, int64_t value);

/* Forgets every value recorded (cping calls it after the warm-up). */
void hdr_reset(struct hdr_histogram *h);

/* Prints every value with its count (see above); 0, or EIO when the stream failed. */
int hdr_percentiles_print(
    struct hdr_histogram *h, FILE *stream, int32_t ticks_per_half_distance, double value_scale, format_type format);

void hdr_close(struct hdr_histogram *h);

#endif
