/*
 * mdfan's stand-in for HdrHistogram_c, as far as Aeron's cping uses it: see hdr/hdr_histogram.h for
 * what it keeps and the output format.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hdr/hdr_histogram.h"

/* Values 0 .. DENSE_VALUES - 1 (ns) are counted in a table, larger ones listed one by one. */
#define DENSE_VALUES (UINT64_C(1) << 20)
#define OVERFLOW_CAPACITY ((size_t)1 << 16)

struct hdr_histogram
{
    uint32_t *counts;         /* DENSE_VALUES counts */
    int64_t *overflow;        /* OVERFLOW_CAPACITY values >= DENSE_VALUES */
    size_t overflow_len;
    uint64_t total;           /* values kept (dense + overflow) */
    uint64_t dropped;         /* values not kept */
};

int hdr_init(
    int64_t lowest_discernible_value,
    int64_t highest_trackable_value,
    int significant_figures,
    struct hdr_histogram **result)
{
    (void)significant_figures;
    if (NULL == result || lowest_discernible_value < 0 || highest_trackable_value < lowest_discernible_value)
    {
        return EINVAL;
    }
    struct hdr_histogram *h = calloc(1, sizeof(struct hdr_histogram));
    if (NULL == h)
    {
        return ENOMEM;
    }
    h->counts = malloc(DENSE_VALUES * sizeof(uint32_t));
    h->overflow = malloc(OVERFLOW_CAPACITY * sizeof(int64_t));
    if (NULL == h->counts || NULL == h->overflow)
    {
        hdr_close(h);
        return ENOMEM;
    }
    /* Written, not just allocated: every page is mapped before the first value is recorded. */
    memset(h->counts, 0, DENSE_VALUES * sizeof(uint32_t));
    memset(h->overflow, 0, OVERFLOW_CAPACITY * sizeof(int64_t));
    *result = h;
    return 0;
}

bool hdr_record_value(struct hdr_histogram *h, int64_t value)
{
    if (value >= 0 && (uint64_t)value < DENSE_VALUES && h->counts[value] < UINT32_MAX)
    {
        h->counts[value]++;
    }
    else if (value >= 0 && h->overflow_len < OVERFLOW_CAPACITY)
    {
        h->overflow[h->overflow_len++] = value;
    }
    else
    {
        h->dropped++;
        return false;
    }
    h->total++;
    return true;
}

void hdr_reset(struct hdr_histogram *h)
{
    memset(h->counts, 0, DENSE_VALUES * sizeof(uint32_t));
    h->overflow_len = 0;
    h->total = 0;
    h->dropped = 0;
}

static int compare_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The smallest value with at least ceil(q * total) values at or below it (q in (0, 1]). */
static int64_t value_at(const struct hdr_histogram *h, double q)
{
    uint64_t rank = (uint64_t)(q * (double)h->total + 0.999999);
    uint64_t seen = 0;
    if (0 == rank)
    {
        rank = 1;
    }
    for (uint64_t v = 0; v < DENSE_VALUES; v++)
    {
        seen += h->counts[v];
        if (seen >= rank)
        {
            return (int64_t)v;
        }
    }
    for (size_t i = 0; i < h->overflow_len; i++)
    {
        if (++seen >= rank)
        {
            return h->overflow[i];
        }
    }
    return 0;
}

int hdr_percentiles_print(
    struct hdr_histogram *h, FILE *stream, int32_t ticks_per_half_distance, double value_scale, format_type format)
{
    (void)ticks_per_half_distance;
    (void)value_scale;
    (void)format;
    qsort(h->overflow, h->overflow_len, sizeof(int64_t), compare_int64);
    int64_t min = -1, max = -1;
    for (uint64_t v = 0; v < DENSE_VALUES; v++)
    {
        if (h->counts[v] > 0)
        {
            min = min < 0 ? (int64_t)v : min;
            max = (int64_t)v;
        }
    }
    if (h->overflow_len > 0)
    {
        min = min < 0 ? h->overflow[0] : min;
        max = h->overflow[h->overflow_len - 1];
    }
    fprintf(stream, "#[mdfan-hdr v1: every recorded value in ns, exact]\n");
    fprintf(stream, "#[samples=%llu dropped=%llu min=%lld max=%lld]\n",
        (unsigned long long)h->total, (unsigned long long)h->dropped, (long long)min, (long long)max);
    for (uint64_t v = 0; v < DENSE_VALUES; v++)
    {
        if (h->counts[v] > 0)
        {
            fprintf(stream, "%llu %lu\n", (unsigned long long)v, (unsigned long)h->counts[v]);
        }
    }
    for (size_t i = 0; i < h->overflow_len;)
    {
        size_t j = i;
        while (j < h->overflow_len && h->overflow[j] == h->overflow[i])
        {
            j++;
        }
        fprintf(stream, "%lld %zu\n", (long long)h->overflow[i], j - i);
        i = j;
    }
    if (h->total > 0)
    {
        fprintf(stream, "#[p50=%lld p99=%lld p99.9=%lld max=%lld]\n",
            (long long)value_at(h, 0.5), (long long)value_at(h, 0.99), (long long)value_at(h, 0.999), (long long)max);
    }
    fprintf(stream, "#[mdfan-hdr end]\n");
    return ferror(stream) ? EIO : 0;
}

void hdr_close(struct hdr_histogram *h)
{
    if (NULL != h)
    {
        free(h->counts);
        free(h->overflow);
        free(h);
    }
}
