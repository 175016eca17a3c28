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

/* Handles. What poas_task_submit and poas_buffer_register hand out is not
 * the address of a record but a slot of one process-wide table with that
 * slot's generation: a handle used after its release (a second wait or
 * unregister, a use after poas_finalize) is recognised and refused instead
 * of reaching freed or reused memory. */
typedef enum poas__handle_kind { POAS__HANDLE_TASK = 1, POAS__HANDLE_BUFFER } poas__handle_kind;

/* A new handle for obj, or 0 when none is left (out of memory). */
uintptr_t poas__handle_new(void *obj, poas__handle_kind kind);
/* The object behind a live handle of that kind, else NULL. */
void *poas__handle_get(uintptr_t h, poas__handle_kind kind);
/* Releases a live handle of that kind and returns its object; NULL (and
 * nothing released) when it is not live. */
void *poas__handle_take(uintptr_t h, poas__handle_kind kind);

/* Bytes of arguments a task carries by value: an asynchronous GEMM's
 * problem and the POAS_FAULT it was submitted under (api/gemm.c). */
#define POAS__TASK_PAYLOAD 1024

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
 * released when it finishes. Tasks never waited for are released by
 * poas__tasks_destroy. */
int poas__tasks_submit(poas__tasks *t, int (*fn)(void *payload), const void *payload,
                       size_t payload_bytes, const poas__access *acc, int nacc,
                       poas_task **out);
/* Waits for every task submitted so far; POAS_ESTATE, waiting for
 * nothing, when called from one of t's tasks. */
int poas__tasks_wait_all(poas__tasks *t);
/* The first failure of a task submitted without a handle (out == NULL)
 * since the last call, with its detail set; 0 when none failed. Such a
 * task has no wait of its own to report it: poas_wait_all does. */
int poas__tasks_take_error(poas__tasks *t);
/* Whether the calling thread is running one of t's tasks (t may be NULL). */
int poas__tasks_in_task(const poas__tasks *t);
/* How many times a wait (poas_task_wait, poas__tasks_wait_all) has
 * returned. Once one has, the caller may have touched any host memory: a
 * task submitted after it must not trust device copies made before. */
unsigned poas__tasks_epoch(poas__tasks *t);

#endif /* POAS_TASKS_H */
