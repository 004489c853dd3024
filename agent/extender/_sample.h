/* What the extender's HTTP fast path (_fastpath.c) uses of the sample reader (_sample.c). */
#ifndef FPGA_SLOT_SAMPLE_H
#define FPGA_SLOT_SAMPLE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_LIMIT 64
/* A rank is a score times this plus a packing (agent/extender/scoretable.py). */
#define RANK_SCALE 128

typedef struct RankTable RankTable;
extern PyTypeObject RankTableType;

/* The last member of a body as kube-scheduler marshals ExtenderArgs (Pod, Nodes, NodeNames, in that order). */
extern const char NAMES_MEMBER[];
#define NAMES_MEMBER_LEN 14

/* The names of the array at body[start], which must be the body's last member (count_names's check), read and
 * hashed for sample_make: their number; -1 if it is not that array; -2 with the error set when memory is short. */
Py_ssize_t sample_read(const char *body, Py_ssize_t size, Py_ssize_t start);

/* An answer as sample.answer makes it: the plain and the settled encoding (new references), where the names
 * it lists first and chose are in the body, and whether the first has a free copy no other pod was promised
 * (it is in ``lifted`` and not in ``skip``: the answer that goes out is then the settled one). */
typedef struct {
    PyObject *plain, *settled;
    Py_ssize_t first_at, first_len, chosen_at, chosen_len; /* first_len -1: the answer lists no name */
    int first_free;
} Made;

/* The answer to the names sample_read read last (of ``body``): 0 and *out made; 1 when a name asked is in
 * ``unknown`` (a node without published state: declined, nothing made); -1 with the error set. ``lifted``,
 * ``skip`` and ``unknown`` may be NULL; 1 <= limit <= MAX_LIMIT. */
int sample_make(const char *body, const RankTable *base, const RankTable *lifted, const RankTable *skip,
                const RankTable *unknown, int limit, unsigned long long pick, Made *out);

#endif
