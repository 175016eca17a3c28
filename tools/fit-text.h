/* fit-text.h: how poas-info and poas-calibrate describe a fitted model in
 * their tables, so that both say the same thing the same way. */
#ifndef POAS_TOOLS_FIT_TEXT_H
#define POAS_TOOLS_FIT_TEXT_H

#include "poas.h"

#include <stddef.h>
#include <stdio.h>

/* A device's transfer model in one direction, as "8.28 us + 15.1 GB/s" or,
 * with a knee, "8.28 us + 15.1 GB/s, 10.2 GB/s past 64 MiB", followed by
 * "; 1.35x while copying both ways" where that factor was measured. */
void tool_transfer_text(const poas_device_fit *f, poas_direction dir, char *buf, size_t cap);
/* Its on-device transpose model of dtype the same way. */
void tool_transpose_text(const poas_device_fit *f, poas_dtype dtype, char *buf, size_t cap);

/* A fit's timing noise (poas_fit_info.timing_noise) as "1.23%", or "-"
 * where it was not measured; returns buf. */
const char *tool_noise_text(double noise, char *buf, size_t cap);

/* Past this timing noise (poas_fit_info.timing_noise) the machine, not
 * the model, bounds what predictions can reach. */
#define TOOL_NOISY 0.03

/* Writes to f, after `prefix`, one line for each of the device's GEMM
 * dtypes calibrated past TOOL_NOISY, saying the machine was busy, one
 * when the runs that timed its fixed costs spread past
 * POAS_RUN_COST_BUSY_S, one when its GEMM sweep ran fewer passes than
 * planned to keep to the time, and tool_handoff_warning's. */
void tool_noise_warnings(FILE *f, const char *prefix, const poas_device_fit *fit);

/* One line when the host handed work between the device's threads slowly
 * at the start or the end of its calibration (poas_device_fit.handoff_start
 * and handoff_end above POAS_HANDOFF_SLOW) or in any of its GEMM sweep's
 * timings (handoff_slow_timings): when, which state the models fit, and
 * what to do. */
void tool_handoff_warning(FILE *f, const char *prefix, const poas_device_fit *fit);

/* The runtime's costs of a run on the device, as "a run costs 12 us beyond
 * its GEMMs and copies, 450 us more through the engine"; "" when neither
 * was measured. */
void tool_run_cost_text(const poas_device_fit *f, char *buf, size_t cap);

/* The pieces the device runs its GEMMs in (poas_device_fit.gemm_block),
 * as "runs sgemm in pieces: C in 512 x 512 blocks, k in steps of 512;
 * dgemm in whole calls"; "" when it runs every GEMM whole. */
void tool_block_text(const poas_device_fit *f, char *buf, size_t cap);

/* The per-call thread counts calibration chose, as "sgemm of 4, 6 rows on
 * 1 thread; sgemm of 4, 12 columns on 1 thread"; "" when every call runs
 * on all threads. */
void tool_threads_text(const poas_device_fit *f, char *buf, size_t cap);
/* f's threads tables as out[dtype][side] (side 0: rows): those of the
 * quick hand-off state, or with `slow` those of the slow one. */
void tool_threads_tables(const poas_device_fit *f, int slow, const unsigned char *out[2][2]);
/* The calls the slow hand-off state moves to one thread
 * (threads_slow_by_*), as "sgemm of 1-32 rows on 1 thread; dgemm of 1-26,
 * 28, 32 rows on 1 thread"; "" when none moves. */
void tool_threads_slow_text(const poas_device_fit *f, char *buf, size_t cap);

/* How long a calibration took, as "took 52.7 s" and, when its devices
 * spent a second or more building their kernels first, " (26.1 s of it
 * building kernels: opencl0 26.1 s; ...)". */
void tool_took_text(const poas_calibration_result *r, char *buf, size_t cap);

#endif
