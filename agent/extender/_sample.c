/*
 * The extender's compiled sample reader: the names kube-scheduler asks about, read from the request's
 * bytes and ranked against tables of every node, without making a Python object per name.
 *
 * Why: at 5000 nodes every prioritize call carries about 500 names. Read in Python, each becomes a new
 * string that is hashed, probed in dicts whose entries (and key strings) the scheduler, the API server and
 * etcd have pushed out of the CPU's caches since the last call, then freed. That alone cost more than the
 * protocol itself in the real-scheduler bench (bench/RESULTS.md). Here a name is hashed from the body's
 * bytes and probed in a compact open-addressing table (16 bytes a slot), and only the few names the answer
 * lists become strings.
 *
 * Offered (agent/extender/sample.py wraps them, with a pure-Python twin for machines
 * without a compiler):
 *
 *   RankTable          name -> rank (an int), kept beside a Python dict by its owner (put, drop);
 *   count_names(body, start)
 *                      the number of names of the array that starts at body[start] ('['), which must be
 *                      the body's last member: the array, then '}', then the end. Each name must be a
 *                      plain string (printable ASCII, no '"', no '\\'); -1 when the body is anything else
 *                      (the caller then parses it whole, and gets the whole parser's errors);
 *   best_of(body, start, base, lifted, skip, limit)
 *                      one pass over those names: a name's rank is its rank in ``lifted`` (unless it is
 *                      in the RankTable ``skip``), else in ``base``; names in
 *                      neither are left out. Returns
 *                      (lowest rank or None, the best ``limit`` as (name, rank) by rank then order asked);
 *   one_slot_head(body)
 *                      count_names's check of the names, and the pod before them read by _podread.c:
 *                      (pod, bitstream, start) when the pod asks one slot of one bitstream, else None;
 *   answer(body, start, base, lifted, skip, unknown, limit, pick)
 *                      best_of's pass made into the encoded answer, plain and settled (see below).
 *
 * The body must have passed count_names first; best_of and answer check nothing it already checked.
 */
#define _GNU_SOURCE /* memmem */
#include "_sample.h"

#include "_fastpath.h"
#include "_podread.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ hashing */

/* A name is told apart by two independent 64-bit hashes, keyed per process (96 bits kept): no key bytes are
 * stored or compared, so a probe reads one slot. Two different names collide with a probability of about
 * 2^-96 per pair, far below the rate of memory errors. */
static uint64_t seed_a, seed_b;

typedef struct {
    uint64_t hash;  /* 0: an empty slot */
    uint32_t check; /* the second hash's low half */
    int32_t rank;
} Slot;

static inline uint64_t finish(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether any byte of w is below 0x20, at or above 0x7f, or a backslash: not part of a plain name. */
static inline int unplain(uint64_t w) {
    uint64_t below = (w - ONES * 0x20) & ~w & HIGHS;
    uint64_t above = (w | (w + ONES * 0x01)) & HIGHS; /* >= 0x80, or 0x7f (+1 reaches 0x80) */
    uint64_t slash = w ^ (ONES * 0x5c);
    slash = (slash - ONES) & ~slash & HIGHS;
    return (below | above | slash) != 0;
}

/* The name's hashes; returns whether it is plain (printable ASCII, no backslash). */
static inline int hash_name(const char *s, Py_ssize_t n, uint64_t *hash, uint32_t *check) {
    uint64_t a = seed_a ^ (uint64_t)n, b = seed_b ^ ((uint64_t)n << 32);
    uint64_t odd = 0;
    int plain = 1;
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        odd |= unplain(w);
        a = (a ^ w) * 0x9e3779b97f4a7c15ULL;
        a ^= a >> 29;
        b = (b + w) * 0xd6e8feb86659fd93ULL;
        b ^= b >> 32;
    }
    if (n > 0) {
        uint64_t w = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            plain &= c >= 0x20 && c < 0x7f && c != '\\';
            w |= (uint64_t)c << (8 * i);
        }
        a = (a ^ w) * 0x9e3779b97f4a7c15ULL;
        a ^= a >> 29;
        b = (b + w) * 0xd6e8feb86659fd93ULL;
        b ^= b >> 32;
    }
    a = finish(a);
    *hash = a ? a : 1;
    *check = (uint32_t)(finish(b) >> 16);
    return plain && !odd;
}

/* ---------------------------------------------------------------------------------------- RankTable */

/* A table's names as bits, one per name by its second hash (false positives, no false negatives): a name that
 * is not there is mostly told apart without reading the table's slots, which are out of the CPU's caches
 * between calls. best_of consults it for the small tables (a bitstream's holders, the promised nodes) that
 * every name asked is probed in. */
#define FILTER_BITS 4096

struct RankTable {
    PyObject_HEAD
    Slot *slots;
    size_t mask; /* capacity - 1; capacity a power of two, at most half used */
    size_t used;
    size_t dropped; /* names dropped since the filter was made: their bits may still be set */
    uint64_t filter[FILTER_BITS / 64];
};

static inline void filter_set(RankTable *t, uint32_t check) {
    t->filter[(check % FILTER_BITS) / 64] |= 1ULL << (check % 64);
}

static inline int filter_has(const RankTable *t, uint32_t check) {
    return (t->filter[(check % FILTER_BITS) / 64] >> (check % 64)) & 1;
}

/* The filter made again from the names held (once more names were dropped than are held). */
static void filter_remake(RankTable *t) {
    memset(t->filter, 0, sizeof t->filter);
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].hash != 0) filter_set(t, t->slots[i].check);
    }
    t->dropped = 0;
}

static int table_alloc(RankTable *t, size_t capacity) {
    Slot *slots = PyMem_Calloc(capacity, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->slots = slots;
    t->mask = capacity - 1;
    t->used = 0;
    return 0;
}

static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist)) return NULL;
    RankTable *t = (RankTable *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    if (table_alloc(t, 16) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void table_dealloc(RankTable *t) {
    PyMem_Free(t->slots);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* The slot holding the name of these hashes, or -1. */
static inline Py_ssize_t table_find(const RankTable *t, uint64_t h, uint32_t check) {
    size_t at = (size_t)h & t->mask;
    for (;;) {
        const Slot *slot = &t->slots[at];
        if (slot->hash == h && slot->check == check) return (Py_ssize_t)at;
        if (slot->hash == 0) return -1;
        at = (at + 1) & t->mask;
    }
}

/* Put a slot whose name the table does not hold (there is room). */
static inline void table_place(RankTable *t, Slot slot) {
    size_t at = (size_t)slot.hash & t->mask;
    while (t->slots[at].hash != 0) at = (at + 1) & t->mask;
    t->slots[at] = slot;
    t->used++;
}

static int table_grow(RankTable *t) {
    Slot *old = t->slots;
    size_t old_capacity = t->mask + 1;
    if (table_alloc(t, old_capacity * 2) < 0) {
        t->slots = old;
        return -1;
    }
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].hash != 0) table_place(t, old[i]);
    }
    PyMem_Free(old);
    return 0;
}

/* The slot of ``name`` in the table (-1: not there; -2: not a str, the error set); its hashes into ``h`` and
 * ``check`` when they are given. */
static Py_ssize_t slot_of(const RankTable *t, PyObject *name, const char *what, uint64_t *h, uint32_t *check) {
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s: the name must be a str", what);
        return -2;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(name, &n);
    if (s == NULL) return -2;
    uint64_t hash;
    uint32_t mark;
    hash_name(s, n, &hash, &mark);
    if (h != NULL) *h = hash;
    if (check != NULL) *check = mark;
    return table_find(t, hash, mark);
}

static PyObject *table_put(RankTable *t, PyObject *args) {
    PyObject *name;
    int rank;
    if (!PyArg_ParseTuple(args, "Ui:put", &name, &rank)) return NULL;
    uint64_t h;
    uint32_t check;
    Py_ssize_t at = slot_of(t, name, "put", &h, &check);
    if (at == -2) return NULL;
    if (at >= 0) {
        t->slots[at].rank = rank;
        Py_RETURN_NONE;
    }
    if ((t->used + 1) * 2 > t->mask + 1 && table_grow(t) < 0) return NULL;
    table_place(t, (Slot){h, check, rank});
    filter_set(t, check);
    Py_RETURN_NONE;
}

static PyObject *table_drop(RankTable *t, PyObject *name) {
    Py_ssize_t found = slot_of(t, name, "drop", NULL, NULL);
    if (found == -2) return NULL;
    if (found < 0) Py_RETURN_NONE;
    /* backward-shift deletion: no tombstones, every probe sequence stays unbroken */
    size_t hole = (size_t)found;
    size_t at = (hole + 1) & t->mask;
    while (t->slots[at].hash != 0) {
        size_t home = (size_t)t->slots[at].hash & t->mask;
        if (((at - home) & t->mask) >= ((at - hole) & t->mask)) {
            t->slots[hole] = t->slots[at];
            hole = at;
        }
        at = (at + 1) & t->mask;
    }
    t->slots[hole].hash = 0;
    t->used--;
    if (++t->dropped > t->used) filter_remake(t);
    Py_RETURN_NONE;
}

static PyObject *table_get(RankTable *t, PyObject *name) {
    Py_ssize_t at = slot_of(t, name, "get", NULL, NULL);
    if (at == -2) return NULL;
    if (at < 0) Py_RETURN_NONE;
    return PyLong_FromLong(t->slots[at].rank);
}

static Py_ssize_t table_len(RankTable *t) { return (Py_ssize_t)t->used; }

static PyMethodDef table_methods[] = {
    {"put", (PyCFunction)table_put, METH_VARARGS, "put(name, rank): set the name's rank"},
    {"drop", (PyCFunction)table_drop, METH_O, "drop(name): forget the name (nothing if absent)"},
    {"get", (PyCFunction)table_get, METH_O, "get(name): the name's rank, or None"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

PyTypeObject RankTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "agent.extender._sample.RankTable",
    .tp_basicsize = sizeof(RankTable),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "name -> rank, probed from request bytes by best_of",
    .tp_methods = table_methods,
    .tp_as_sequence = &table_as_sequence,
    .tp_new = table_new,
};

/* ------------------------------------------------------------------------------------ the names array */

/* A name of the array: its hashes and where it is in the body. */
typedef struct {
    uint64_t hash;
    uint32_t check;
    Py_ssize_t from, len;
} Name;

/* The names of the last array read, hashed. A call reads a body's names twice (one_slot_head, then answer),
 * with Python's bookkeeping between: the second reads them from here when the body is the same bytes object
 * (held, so it cannot be another object at the same address; bytes do not change). */
static struct {
    PyObject *body; /* NULL: the names are of no body held (not bytes, or nothing read yet) */
    Py_ssize_t start, count, capacity;
    Name *names;
} memo;

/* The names of the array at body[start], the body's last member (the array, then '}', then the end), into
 * memo.names: their number; -1 if it is not that array (each name a plain string: printable ASCII, no '"',
 * no '\\'), -2 with the error set when memory is short. */
static Py_ssize_t read_names(const char *body, Py_ssize_t size, Py_ssize_t start) {
    if (start < 0 || size - start < 3 || body[start] != '[' || body[size - 2] != ']' || body[size - 1] != '}') return -1;
    const char *at = body + start + 1, *end = body + size - 2; /* the array's inside */
    if (at == end) return 0;
    Py_ssize_t count = 0;
    for (;;) {
        if (*at != '"') return -1;
        const char *close = memchr(at + 1, '"', (size_t)(end - at - 1));
        if (close == NULL) return -1;
        if (count == memo.capacity) {
            Py_ssize_t capacity = memo.capacity ? memo.capacity * 2 : 1024;
            Name *grown = PyMem_Realloc(memo.names, (size_t)capacity * sizeof(Name));
            if (grown == NULL) {
                PyErr_NoMemory();
                return -2;
            }
            memo.names = grown;
            memo.capacity = capacity;
        }
        Name *name = &memo.names[count++];
        name->from = at + 1 - body;
        name->len = close - at - 1;
        if (!hash_name(at + 1, name->len, &name->hash, &name->check)) return -1;
        at = close + 1;
        if (at == end) return count;
        if (*at != ',') return -1;
        at++;
        if (at == end) return -1;
    }
}

/* The number of names of the array at body[start] (read_names), which are then in memo.names: read again
 * unless they are of this very bytes object and start. */
static Py_ssize_t names_of(PyObject *obj, const char *body, Py_ssize_t size, Py_ssize_t start) {
    if (memo.body != NULL && memo.body == obj && memo.start == start) return memo.count;
    Py_CLEAR(memo.body);
    Py_ssize_t count = read_names(body, size, start);
    memo.count = count < 0 ? 0 : count;
    if (count >= 0 && PyBytes_CheckExact(obj)) {
        memo.body = Py_NewRef(obj);
        memo.start = start;
    }
    return count;
}

static PyObject *count_names(PyObject *module, PyObject *args) {
    Py_buffer body;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n:count_names", &body, &start)) return NULL;
    Py_ssize_t count = names_of(body.obj, body.buf, body.len, start);
    PyBuffer_Release(&body);
    return count == -2 ? NULL : PyLong_FromSsize_t(count);
}

/* The last member of a body as kube-scheduler marshals ExtenderArgs (Pod, Nodes, NodeNames, in that order). */
const char NAMES_MEMBER[] = ",\"NodeNames\":[";

static PyObject *one_slot_head(PyObject *module, PyObject *arg) {
    Py_buffer body;
    if (PyObject_GetBuffer(arg, &body, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    const char *s = body.buf;
    const char *member = memmem(s, (size_t)body.len, NAMES_MEMBER, NAMES_MEMBER_LEN);
    Py_ssize_t at = member == NULL ? -1 : member - s, start = at + NAMES_MEMBER_LEN - 1;
    Py_ssize_t count = at < 0 ? -1 : names_of(arg, s, body.len, start);
    if (count == -2) goto done;
    if (count < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = one_slot_pod(s, at, start);
done:
    PyBuffer_Release(&body);
    return result;
}

typedef struct {
    uint64_t hash;
    uint32_t check;
    int32_t rank;
    int32_t order;
    int free; /* ranked from ``lifted``: a free copy no other pod was promised */
    Py_ssize_t at;
    Py_ssize_t len;
} Kept;

/* Whether a is better than b: higher rank, then asked first. */
static inline int better(int32_t rank, int32_t order, const Kept *b) {
    return rank > b->rank || (rank == b->rank && order < b->order);
}

/* An optional table argument: NULL for None, else the RankTable; -1 with the error set when it is neither. */
static int optional_table(PyObject *obj, const char *what, const char *role, RankTable **out) {
    *out = NULL;
    if (obj == Py_None) return 0;
    if (!PyObject_TypeCheck(obj, &RankTableType)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a RankTable or None", what, role);
        return -1;
    }
    *out = (RankTable *)obj;
    return 0;
}

/* The tables best_of and answer take: base a RankTable, lifted and skip RankTables or None. -1 with the error
 * set when one is not. */
static int tables_of(PyObject *base_obj, PyObject *lifted_obj, PyObject *skip_obj, int limit, const char *what,
                     RankTable **base, RankTable **lifted, RankTable **skip) {
    if (!PyObject_TypeCheck(base_obj, &RankTableType)) {
        PyErr_Format(PyExc_TypeError, "%s: base must be a RankTable", what);
        return -1;
    }
    *base = (RankTable *)base_obj;
    if (optional_table(lifted_obj, what, "lifted", lifted) < 0 || optional_table(skip_obj, what, "skip", skip) < 0)
        return -1;
    if (limit < 1 || limit > MAX_LIMIT) {
        PyErr_Format(PyExc_ValueError, "%s: limit must be 1..%d, got %d", what, MAX_LIMIT, limit);
        return -1;
    }
    return 0;
}

/* ranked: a name asked is in the table ``unknown`` (a node without published state). */
#define UNKNOWN (-2)

/* One pass over the ``count`` names in memo.names (of the body s): the best ``limit`` into kept (by rank, then
 * order asked), their number returned, the lowest rank of a name found into *lowest (INT64_MAX when none is
 * found); UNKNOWN as soon as a name not in ``base`` is in ``unknown`` (when given). An empty ``lifted`` counts
 * as none. */
static int ranked(Py_ssize_t count, const RankTable *base, const RankTable *lifted, const RankTable *skip,
                  const RankTable *unknown, int limit, Kept *kept, int64_t *lowest) {
    const Name *names = memo.names;
    if (lifted != NULL && lifted->used == 0) lifted = NULL;
    int nkept = 0;
    *lowest = INT64_MAX;
    /* Each name's slot in the base table is fetched AHEAD names before it is probed: the table is out of the
     * CPU's caches between calls; probed one by one, each name would wait for memory. */
    enum { AHEAD = 16 };
    for (Py_ssize_t k = 0; k < count && k < AHEAD; k++) __builtin_prefetch(&base->slots[names[k].hash & base->mask]);
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + AHEAD < count) __builtin_prefetch(&base->slots[names[k + AHEAD].hash & base->mask]);
        uint64_t h = names[k].hash;
        uint32_t check = names[k].check;
        int32_t order = (int32_t)k;
        Py_ssize_t slot = table_find(base, h, check);
        if (slot < 0) {
            if (unknown != NULL && filter_has(unknown, check) && table_find(unknown, h, check) >= 0) return UNKNOWN;
            continue;
        }
        int32_t rank = base->slots[slot].rank;
        int free = 0;
        Py_ssize_t hit = lifted != NULL && filter_has(lifted, check) ? table_find(lifted, h, check) : -1;
        if (hit >= 0 && (skip == NULL || !filter_has(skip, check) || table_find(skip, h, check) < 0)) {
            rank = lifted->slots[hit].rank;
            free = 1;
        }
        if (rank < *lowest) *lowest = rank;
        if (nkept == limit && !better(rank, order, &kept[nkept - 1])) continue;
        int dup = 0;
        for (int i = 0; i < nkept && !dup; i++) dup = kept[i].hash == h && kept[i].check == check;
        if (dup) continue; /* a name asked twice counts once (kube-scheduler never sends one twice) */
        int i = nkept == limit ? nkept - 1 : nkept++; /* full: the worst kept makes way */
        while (i > 0 && better(rank, order, &kept[i - 1])) {
            kept[i] = kept[i - 1];
            i--;
        }
        kept[i] = (Kept){h, check, rank, order, free, names[k].from, names[k].len};
    }
    return nkept;
}

/* The names of the array at start (count_names's check passed, or made here): their number in memo.names;
 * -1 with the error set when there is none. */
static Py_ssize_t checked_names(PyObject *obj, const char *s, Py_ssize_t size, Py_ssize_t start) {
    Py_ssize_t count = names_of(obj, s, size, start);
    if (count == -1) PyErr_SetString(PyExc_ValueError, "no plain names array at start");
    return count < 0 ? -1 : count;
}

static PyObject *best_of(PyObject *module, PyObject *args) {
    Py_buffer body;
    Py_ssize_t start;
    PyObject *base_obj, *lifted_obj, *skip_obj;
    int limit;
    if (!PyArg_ParseTuple(args, "y*nOOOi:best_of", &body, &start, &base_obj, &lifted_obj, &skip_obj, &limit))
        return NULL;
    PyObject *result = NULL, *listed = NULL;
    RankTable *base, *lifted, *skip;
    Kept kept[MAX_LIMIT];
    int64_t lowest;
    if (tables_of(base_obj, lifted_obj, skip_obj, limit, "best_of", &base, &lifted, &skip) < 0) goto done;
    Py_ssize_t count = checked_names(body.obj, body.buf, body.len, start);
    if (count < 0) goto done;
    int nkept = ranked(count, base, lifted, skip, NULL, limit, kept, &lowest);
    listed = PyList_New(nkept);
    if (listed == NULL) goto done;
    for (int i = 0; i < nkept; i++) {
        const char *name = (const char *)body.buf + kept[i].at;
        PyObject *entry = Py_BuildValue("(Ni)", PyUnicode_DecodeASCII(name, kept[i].len, NULL), kept[i].rank);
        if (entry == NULL) goto done;
        PyList_SET_ITEM(listed, i, entry);
    }
    if (lowest == INT64_MAX) {
        result = Py_BuildValue("(OO)", Py_None, listed);
    } else {
        result = Py_BuildValue("(LO)", (long long)lowest, listed);
    }
done:
    Py_XDECREF(listed);
    PyBuffer_Release(&body);
    return result;
}

/* ------------------------------------------------------------------------------------------- answer */

/* Name order as Python orders str: the names are ASCII, so by bytes, a prefix first. */
static int name_order(const char *s, const Kept *a, const Kept *b) {
    Py_ssize_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(s + a->at, s + b->at, (size_t)n);
    if (c != 0) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* A HostPriorityList as kube-scheduler reads it: [{"Host":"name","Score":n},...], compact, the names plain
 * ASCII as count_names found them (nothing to escape); entries whose score is 0 or less left out. */
static PyObject *priorities(const char *s, const Kept *kept, const int *scores, int n) {
    Py_ssize_t size = 2;
    for (int i = 0; i < n; i++) size += kept[i].len + 36;
    char *out = PyMem_Malloc((size_t)size);
    if (out == NULL) return PyErr_NoMemory();
    char *p = out;
    *p++ = '[';
    for (int i = 0; i < n; i++) {
        if (scores[i] <= 0) continue;
        if (p > out + 1) *p++ = ',';
        memcpy(p, "{\"Host\":\"", 9);
        p += 9;
        memcpy(p, s + kept[i].at, (size_t)kept[i].len);
        p += kept[i].len;
        p += sprintf(p, "\",\"Score\":%d}", scores[i]);
    }
    *p++ = ']';
    PyObject *encoded = PyBytes_FromStringAndSize(out, p - out);
    PyMem_Free(out);
    return encoded;
}

Py_ssize_t sample_read(const char *body, Py_ssize_t size, Py_ssize_t start) {
    Py_CLEAR(memo.body); /* the names read are of no bytes object held: never taken for another body's */
    Py_ssize_t count = read_names(body, size, start);
    memo.count = count < 0 ? 0 : count;
    return count;
}

/* The answer from the ``count`` names in memo.names (see sample_make). */
static int make(const char *s, Py_ssize_t count, const RankTable *base, const RankTable *lifted,
                const RankTable *skip, const RankTable *unknown, int limit, unsigned long long pick, Made *out) {
    Kept kept[MAX_LIMIT];
    int scores[MAX_LIMIT] = {0};
    int64_t lowest;
    int nkept = ranked(count, base, lifted, skip, unknown, limit, kept, &lowest);
    if (nkept == UNKNOWN) return 1;
    int listed = 0;
    if (nkept > 0) {
        int64_t floor = lowest / RANK_SCALE, top = (floor + 1) * RANK_SCALE;
        while (listed < nkept && kept[listed].rank >= top) {
            scores[listed] = (int)(kept[listed].rank / RANK_SCALE - floor);
            listed++;
        }
    }
    *out = (Made){NULL, NULL, 0, -1, 0, -1, 0};
    out->plain = priorities(s, kept, scores, listed);
    if (out->plain == NULL) return -1;
    if (listed == 0) {
        out->settled = Py_NewRef(out->plain);
        return 0;
    }
    int tied[MAX_LIMIT], ntied = 0;
    for (int i = 0; i < listed && kept[i].rank == kept[0].rank; i++) {
        int j = ntied++;
        for (; j > 0 && name_order(s, &kept[i], &kept[tied[j - 1]]) < 0; j--) tied[j] = tied[j - 1];
        tied[j] = i;
    }
    int chosen = tied[pick % (unsigned long long)ntied], top_score = scores[0];
    for (int i = 0; i < listed; i++) {
        if (scores[i] == top_score && i != chosen) scores[i] = top_score - 1;
    }
    out->settled = priorities(s, kept, scores, listed);
    if (out->settled == NULL) {
        Py_CLEAR(out->plain);
        return -1;
    }
    out->first_at = kept[0].at;
    out->first_len = kept[0].len;
    out->chosen_at = kept[chosen].at;
    out->chosen_len = kept[chosen].len;
    out->first_free = kept[0].free;
    return 0;
}

int sample_make(const char *body, const RankTable *base, const RankTable *lifted, const RankTable *skip,
                const RankTable *unknown, int limit, unsigned long long pick, Made *out) {
    return make(body, memo.count, base, lifted, skip, unknown, limit, pick, out);
}

/*
 * answer(body, start, base, lifted, skip, unknown, limit, pick) -> (plain, first, chosen, settled) | None
 *
 * best_of's pass, then the answer as rankwalk.listed and promises.settle make it, encoded (None when a name
 * asked is in ``unknown``, a node without published state: the caller then scores per name):
 *   plain    the entries above the floor, scores shifted to it (the floor the lowest score found);
 *   first    the name plain lists first (None: it lists none);
 *   chosen   of the names that tie for the top (same rank), the one at ``pick`` modulo their number, in
 *            name order (None: plain lists none);
 *   settled  plain with every other entry at the top score one point lower (an entry brought to 0 left out).
 * The caller sends settled when ``first`` has a free copy no other pod was promised, else plain.
 */
static PyObject *answer(PyObject *module, PyObject *args) {
    Py_buffer body;
    Py_ssize_t start;
    PyObject *base_obj, *lifted_obj, *skip_obj, *unknown_obj;
    int limit;
    unsigned long long pick;
    if (!PyArg_ParseTuple(args, "y*nOOOOiK:answer", &body, &start, &base_obj, &lifted_obj, &skip_obj, &unknown_obj,
                          &limit, &pick))
        return NULL;
    PyObject *result = NULL;
    RankTable *base, *lifted, *skip, *unknown;
    const char *s = body.buf;
    Made made;
    if (tables_of(base_obj, lifted_obj, skip_obj, limit, "answer", &base, &lifted, &skip) < 0 ||
        optional_table(unknown_obj, "answer", "unknown", &unknown) < 0)
        goto done;
    Py_ssize_t count = checked_names(body.obj, s, body.len, start);
    if (count < 0) goto done;
    int outcome = make(s, count, base, lifted, skip, unknown, limit, pick, &made);
    if (outcome < 0) goto done;
    if (outcome == 1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (made.first_len < 0) {
        result = Py_BuildValue("(OOOO)", made.plain, Py_None, Py_None, made.plain);
    } else {
        result = Py_BuildValue("(ONNO)", made.plain, PyUnicode_DecodeASCII(s + made.first_at, made.first_len, NULL),
                               PyUnicode_DecodeASCII(s + made.chosen_at, made.chosen_len, NULL), made.settled);
    }
    Py_DECREF(made.plain);
    Py_DECREF(made.settled);
done:
    PyBuffer_Release(&body);
    return result;
}

/* ------------------------------------------------------------------------------------------ module */

static PyMethodDef module_methods[] = {
    {"count_names", count_names, METH_VARARGS,
     "count_names(body, start): the names in the body's last member, a plain array at start; -1 if not"},
    {"best_of", best_of, METH_VARARGS,
     "best_of(body, start, base, lifted, skip, limit): (lowest rank, the best (name, rank) entries)"},
    {"answer", answer, METH_VARARGS,
     "answer(body, start, base, lifted, skip, unknown, limit, pick): (plain, first, chosen, settled) or None, "
     "see the source"},
    {"one_slot_head", one_slot_head, METH_O,
     "one_slot_head(body): (pod, bitstream, names start) of a body that ends with plain NodeNames and whose pod "
     "asks one slot of one bitstream, else None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sample_module = {
    PyModuleDef_HEAD_INIT, "agent.extender._sample", "The extender's compiled sample reader.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__sample(void) {
    if (PyType_Ready(&RankTableType) < 0 || fastpath_ready() < 0) return NULL;
    PyObject *module = PyModule_Create(&sample_module);
    if (module == NULL) return NULL;
    if (PyModule_AddIntConstant(module, "MAX_LIMIT", MAX_LIMIT) < 0 ||
        PyModule_AddIntConstant(module, "RANK_SCALE", RANK_SCALE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddType(module, &RankTableType) < 0 || PyModule_AddType(module, &FastPathType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    /* a seed per process: a table's layout is not the same from one process to the next */
    PyObject *os = PyImport_ImportModule("os");
    PyObject *random = os ? PyObject_CallMethod(os, "urandom", "i", 16) : NULL;
    Py_XDECREF(os);
    if (random == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    memcpy(&seed_a, PyBytes_AS_STRING(random), 8);
    memcpy(&seed_b, PyBytes_AS_STRING(random) + 8, 8);
    Py_DECREF(random);
    return module;
}
