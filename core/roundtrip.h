/* roundtrip.h: how long a cache line takes to go from one host core to
 * another and back, measured by two threads bouncing it. On the CI VM this
 * is what tells the host's hand-off state apart (models/model.h,
 * handoff_latency_ns): 51-104 ns while the host keeps the two vCPUs close
 * and OpenBLAS's threads hand work over quickly, 250-360 ns while it keeps
 * them apart and a thin sgemm takes 2.2-3.3x as long on two threads as on
 * one (bench/results/handoff-latency-ci-2core-2026-11-24.md). */
#ifndef POAS_CORE_ROUNDTRIP_H
#define POAS_CORE_ROUNDTRIP_H

/* The round trip, in nanoseconds, of a cache line between OS cpus
 * `cpu_a` (the calling thread, moved there for the measurement and given
 * its own binding back) and `cpu_b` (a helper thread started there): the
 * mean of the quickest of four blocks of POAS__ROUNDTRIPS / 4 trips, after
 * a few to warm up. About 0.2 ms on the CI
 * VM, most of it starting and joining the helper. Returns 0 when it
 * cannot measure (the same cpu twice, a cpu the process may not use, a
 * thread that cannot start). */
#define POAS__ROUNDTRIPS 32
double poas__roundtrip_ns(int cpu_a, int cpu_b);

#endif
