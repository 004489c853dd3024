/* What the extender's HTTP fast path (_fastpath.c) records after each answer it wrote (_fastbooks.c). */
#ifndef FPGA_SLOT_FASTBOOKS_H
#define FPGA_SLOT_FASTBOOKS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* At most this many latency bucket bounds. */
#define MAX_BOUNDS 32

typedef struct {
    /* The answers' count and latency, as agent/extender/metrics.py counts the ones Python makes. */
    unsigned long long answers;
    double seconds;
    int nbounds;
    double bounds[MAX_BOUNDS];
    unsigned long long buckets[MAX_BOUNDS + 1]; /* the last: past every bound */
    /* The pods counted once each in the request shares (NULL: no books kept, see keep()). */
    PyObject *counted;   /* an OrderedDict, oldest first */
    Py_ssize_t counted_limit;
    PyObject *unweighed; /* the list of bitstreams noted and not weighed yet */
    Py_ssize_t change_memory;
    PyObject *weigh;     /* () -> None: weighs them, emptying the list in place */
    /* The promises (NULL: the board makes none). */
    PyObject *promises;  /* the Promises object (its pending promise is read) */
    PyObject *by_pod, *on_node, *taken, *full, *reshaped, *promise_type;
    double ttl;
    PyObject *record;    /* (pod, node, bitstream, now) -> None: the promise made in Python, for the rare cases */
} Books;

/* Count an answer that took ``seconds``. */
void books_time(Books *books, double seconds);

/* (answers, seconds, bucket counts) as a new tuple. */
PyObject *books_latency(const Books *books);

/* Set the latency bounds (a sequence of increasing floats): 0, or -1 with the error set. */
int books_bounds(Books *books, PyObject *bounds);

/* FastPath.keep(...)'s arguments taken (see _fastbooks.c): 0, or -1 with the error set. */
int books_keep(Books *books, PyObject *args);

/* After an answer to ``pod`` (``chosen``: the node promised to it, or None) was written: what Python would have
 * recorded (the pod counted, the promise). 0, or -1 with the error set. */
int books_record(Books *books, PyObject *cache, PyObject *pod, PyObject *bitstream, PyObject *chosen, double now);

int books_traverse(Books *books, visitproc visit, void *arg);
void books_clear(Books *books);

/* Intern the attribute names (once, at module init): 0, or -1 with the error set. */
int books_ready(void);

#endif
