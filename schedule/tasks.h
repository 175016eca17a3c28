/* tasks.h: the context-level runtime behind the task API: one engine whose
 * workers persist from the first task to poas_finalize. Tasks are host
 * calls with declared accesses; they are ordered by inference exactly as a
 * GEMM run's instructions are. Every host access, to registered memory or
 * not (an asynchronous GEMM's operands), is a byte range of one buffer
 * standing for the whole address space: accesses are ordered by the bytes
 * they touch, whichever registration (if any) named them. */
#ifndef POAS_TASKS_H
#define POAS_TASKS_H

#include "schedule/engine.h"

typedef struct poas__tasks poas__tasks;

/* Bytes of arguments a task carries by value. */
#define POAS__TASK_PAYLOAD 256

int poas__tasks_create(const poas__devset *set, poas__tasks **out);
/* Waits for every task, stops the workers; NULL is allowed. */
void poas__tasks_destroy(poas__tasks *t);

/* The region for bytes [lo, hi) of host memory. */
poas__region poas__tasks_host_region(const poas__tasks *t, uintptr_t lo, uintptr_t hi);
/* A region standing for the context's devices, which runs that drive them
 * write so that they run one at a time. */
poas__region poas__tasks_devices_region(const poas__tasks *t);

/* Submits fn(payload copy) with accesses acc[0..nacc). *out, when out is
 * not NULL, is the handle poas_task_wait releases; otherwise the task is
 * released when it finishes. */
int poas__tasks_submit(poas__tasks *t, int (*fn)(void *payload), const void *payload,
                       size_t payload_bytes, const poas__access *acc, int nacc,
                       poas_task **out);
/* Waits for every task submitted so far. */
void poas__tasks_wait_all(poas__tasks *t);
/* How many times a wait (poas_task_wait, poas__tasks_wait_all) has
 * returned. Once one has, the caller may have touched any host memory: a
 * task submitted after it must not trust device copies made before. */
unsigned poas__tasks_epoch(poas__tasks *t);

#endif /* POAS_TASKS_H */
