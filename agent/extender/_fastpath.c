/*
 * The extender's fast path: kube-scheduler's common call answered from the connection's bytes to the response's
 * bytes in one call, with no Python code between.
 *
 * Nearly every call is a prioritize request whose pod asks one slot of one bitstream, and the answer to it comes
 * from tables that the Python side keeps (agent/extender/oneslot.py, promises.py). Python framing the request,
 * routing it and looking those tables up cost more CPU per call than the answer itself, and kube-scheduler waits
 * for every call inside its scheduling cycle. So a FastPath holds, per bitstream, the tables a call of it is
 * answered from, as the last Python answer for that bitstream found them, and answers a call itself while those
 * are still what Python would find: agent/extender/fastpath.py arms it after such an answer and says until when
 * (the clock step of the ranks, the cluster values' step, the oldest promise's expiry), for which node cache
 * state (the cache's change log as a list object and its length), and which pods it must leave to Python (those
 * with a promise: the scheduler asks again, the old promise is released first).
 *
 * FastPath.serve(data, write) -> None | 0 | consumed | (consumed, error)
 *
 *   None     not a request this path answers, or not now: the caller hands every byte to its HTTP parser;
 *   0        the start of such a request: the caller keeps the bytes and calls again with more;
 *   consumed answered: the response (status line, headers, body) to the first ``consumed`` bytes of data was
 *            passed to ``write``, and then recorded what Python records after such an answer (_fastbooks.c:
 *            the pod counted, the copy promised to it, the answer and its latency in the metrics);
 *   (consumed, error)
 *            answered and written, but recording failed with ``error``: the path disarmed itself (Python
 *            answers until it arms it again).
 *
 * The requests it takes are a strict subset of HTTP/1.1 (what Go's client sends): the request line exactly
 * "POST <path> HTTP/1.1", header lines "name: value" with a token name and printable ASCII values, CRLF line
 * ends, one Content-Length of at most max_body bytes (and at most BODY_LIMIT), Content-Type absent or
 * application/json, no Transfer-Encoding, Connection, Expect, Upgrade or Keep-Alive header. Anything else is
 * None, and the HTTP parser sees the same bytes as if this path did not exist; so does the body: a pod that is
 * not the common one, names that are not a plain array, a name without published state.
 */
#define _GNU_SOURCE /* memmem */
#include "_fastpath.h"

#include "_fastbooks.h"
#include "_podread.h"
#include "_sample.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

/* The request line and headers are at most this long; longer: not taken. */
#define HEAD_LIMIT 8192
/* Bodies above this are left to the HTTP parser (which streams them); kube-scheduler's are ~40 bytes a name. */
#define BODY_LIMIT (1 << 20)

typedef struct {
    PyObject_HEAD
    PyObject *line;     /* bytes: "POST <path> HTTP/1.1\r\n" */
    PyObject *clock;    /* () -> float, the clock the Python side reads */
    int armed;          /* answers at all */
    PyObject *cache;    /* the node cache the entries were made from */
    PyObject *changes;  /* its change log then (a list) */
    Py_ssize_t seen;    /* the log's length then */
    double since, until; /* answers only while since <= clock() < until */
    PyObject *promised; /* pods with a promise (a dict), or NULL: no promises */
    PyObject *entries;  /* bitstream -> (base, lifted, skip, unknown) */
    int limit;
    Py_ssize_t max_body;
    Books books;        /* what is recorded after each answer */
} FastPath;

/* "changes": the node cache's change log, read on every call. */
static PyObject *changes_name;

/* ------------------------------------------------------------------------------------------- framing */

static inline int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int is_token(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Whether the header name s[0:n] is ``word`` (lower case), ignoring case. */
static int named(const char *s, Py_ssize_t n, const char *word) {
    Py_ssize_t len = (Py_ssize_t)strlen(word);
    if (n != len) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lower((unsigned char)s[i]) != word[i]) return 0;
    }
    return 1;
}

/* Headers whose meaning this path does not take on: the HTTP parser handles a request that has one. */
static const char *const DECLINED[] = {"transfer-encoding", "connection", "expect", "upgrade", "keep-alive", NULL};

/* Whether v[0:n], a header value so far (OWS not trimmed), can still become ``word`` (lower case) with OWS
 * around it. */
static int may_become(const char *v, Py_ssize_t n, const char *word) {
    Py_ssize_t at = 0, len = (Py_ssize_t)strlen(word), i = 0;
    while (at < n && (v[at] == ' ' || v[at] == '\t')) at++;
    for (; at < n && i < len; at++, i++) {
        if (lower((unsigned char)v[at]) != word[i]) return 0;
    }
    for (; at < n; at++) {
        if (v[at] != ' ' && v[at] != '\t') return 0;
    }
    return 1;
}

/* Whether v[0:n] can still become a Content-Length this path takes: OWS, at most 9 digits, OWS. */
static int may_be_length(const char *v, Py_ssize_t n) {
    Py_ssize_t at = 0, digits = 0;
    while (at < n && (v[at] == ' ' || v[at] == '\t')) at++;
    while (at < n && v[at] >= '0' && v[at] <= '9') at++, digits++;
    while (at < n && (v[at] == ' ' || v[at] == '\t')) at++;
    return at == n && digits <= 9;
}

/* The request at the start of s[0:n]: 1 when whole (its head's length into *head, its body's into *body),
 * 0 when it may still become one (more bytes needed), -1 as soon as it cannot be one this path takes. Each
 * byte of the head is checked as it arrives, so that a request this path does not take is handed to the parser
 * at the byte that tells, not held until its head is whole: a request the parser refuses gets the parser's
 * answer even when the client sends no more. */
static int frame(const FastPath *self, const char *s, Py_ssize_t n, Py_ssize_t *head, Py_ssize_t *body) {
    const char *line = PyBytes_AS_STRING(self->line);
    Py_ssize_t line_len = PyBytes_GET_SIZE(self->line);
    if (memcmp(s, line, (size_t)(n < line_len ? n : line_len)) != 0) return -1;
    if (n < line_len) return 0;
    const char *p = s + line_len, *end = s + n, *most = s + HEAD_LIMIT;
    long long length = -1;
    for (;;) {
        if (p == end) return p < most ? 0 : -1;
        if (*p == '\r') { /* the blank line that ends the head */
            if (p + 1 == end) return 0;
            if (p[1] != '\n') return -1;
            p += 2;
            break;
        }
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        const char *stop = eol != NULL ? eol : end;
        if (stop > most) return -1;
        const char *q = p;
        while (q < stop && is_token((unsigned char)*q)) q++;
        if (q == stop) return eol == NULL ? 0 : -1; /* a name so far; a line without a colon */
        if (q == p || *q != ':') return -1;
        const char *name = p, *v = q + 1;
        Py_ssize_t name_len = q - p;
        for (const char *c = v; c < stop; c++) {
            unsigned char u = (unsigned char)*c;
            if (u != '\t' && (u < 0x20 || u > 0x7e)) return -1;
        }
        for (const char *const *word = DECLINED; *word != NULL; word++) {
            if (named(name, name_len, *word)) return -1;
        }
        int is_length = named(name, name_len, "content-length");
        if (is_length && (length >= 0 || !may_be_length(v, stop - v))) return -1;
        if (named(name, name_len, "content-type") && !may_become(v, stop - v, "application/json")) return -1;
        if (eol == NULL || eol + 1 == end) return 0; /* the line is not whole yet */
        if (eol[1] != '\n') return -1;
        const char *v_end = eol;
        while (v < v_end && (*v == ' ' || *v == '\t')) v++;
        while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t')) v_end--;
        if (is_length) {
            if (v == v_end) return -1;
            length = 0;
            for (const char *c = v; c < v_end; c++) length = length * 10 + (*c - '0');
        } else if (named(name, name_len, "content-type") && v_end - v != 16) {
            return -1; /* a prefix of application/json */
        }
        p = eol + 2;
    }
    if (length < 0 || length > self->max_body || length > BODY_LIMIT) return -1;
    *head = p - s;
    *body = (Py_ssize_t)length;
    return n - *head >= length ? 1 : 0;
}

/* -------------------------------------------------------------------------------------------- answer */

/* CRC-32 (IEEE 802.3, as zlib.crc32): the pick among nodes that tie for the top, as promises.py picks it. */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const char *s, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) c = crc_table[(c ^ (unsigned char)s[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Whether the entries still hold: armed, the clock within [since, until), the cache's log as it was. 1 yes
 * (*now read), 0 no, -1 with the error set. */
static int current(FastPath *self, double *now) {
    if (!self->armed) return 0;
    PyObject *changes = PyObject_GetAttr(self->cache, changes_name);
    if (changes == NULL) return -1;
    int same = changes == self->changes && PyList_Check(changes) && PyList_GET_SIZE(changes) == self->seen;
    Py_DECREF(changes);
    if (!same) return 0;
    PyObject *clock = PyObject_CallNoArgs(self->clock);
    if (clock == NULL) return -1;
    *now = PyFloat_AsDouble(clock);
    Py_DECREF(clock);
    if (*now == -1.0 && PyErr_Occurred()) return -1;
    return self->since <= *now && *now < self->until;
}

/* The RankTable or NULL of an entry's member; -1 when it is neither a RankTable nor None. */
static int entry_table(PyObject *obj, int required, const RankTable **out) {
    *out = NULL;
    if (obj == Py_None && !required) return 0;
    if (!PyObject_TypeCheck(obj, &RankTableType)) {
        PyErr_SetString(PyExc_TypeError, "FastPath: an entry holds (RankTable, and RankTables or None)");
        return -1;
    }
    *out = (const RankTable *)obj;
    return 0;
}

static const char RESPONSE_HEAD[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zd\r\n\r\n";

/* The whole response for the answer body ``answer``. */
static PyObject *response(PyObject *answer) {
    char head[128];
    Py_ssize_t size = PyBytes_GET_SIZE(answer);
    int n = snprintf(head, sizeof head, RESPONSE_HEAD, size);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n + size);
    if (out == NULL) return NULL;
    memcpy(PyBytes_AS_STRING(out), head, (size_t)n);
    memcpy(PyBytes_AS_STRING(out) + n, PyBytes_AS_STRING(answer), (size_t)size);
    return out;
}

/* After the answer to ``pod`` was written: recorded (_fastbooks.c). ``consumed``, or (consumed, error) when
 * recording failed: the path then disarms itself, as what it recorded may be half done. */
static PyObject *recorded(FastPath *self, Py_ssize_t consumed, PyObject *pod, PyObject *bitstream, PyObject *chosen,
                          double now, double started) {
    books_time(&self->books, seconds_now() - started);
    if (books_record(&self->books, self->cache, pod, bitstream, chosen, now) == 0) return PyLong_FromSsize_t(consumed);
    self->armed = 0;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    PyObject *result = Py_BuildValue("(nO)", consumed, value != NULL ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return result;
}

/* The answer to the body s[0:size] of a whole request, passed to ``write``: what serve returns (NULL: error). */
static PyObject *answer_body(FastPath *self, const char *s, Py_ssize_t size, Py_ssize_t consumed, double started,
                             PyObject *write) {
    double now;
    int fresh = current(self, &now);
    if (fresh <= 0) return fresh < 0 ? NULL : Py_NewRef(Py_None);
    const char *member = memmem(s, (size_t)size, NAMES_MEMBER, NAMES_MEMBER_LEN);
    if (member == NULL) Py_RETURN_NONE;
    Py_ssize_t at = member - s, start = at + NAMES_MEMBER_LEN - 1;
    Py_ssize_t count = sample_read(s, size, start);
    if (count == -2) return NULL;
    if (count < 0) Py_RETURN_NONE;
    PyObject *head = one_slot_pod(s, at, start); /* (pod, bitstream, start) or None */
    if (head == NULL || head == Py_None) return head;
    PyObject *result = NULL, *pod = PyTuple_GET_ITEM(head, 0), *bitstream = PyTuple_GET_ITEM(head, 1);
    int promised = self->promised != NULL ? PyDict_Contains(self->promised, pod) : 0;
    if (promised != 0) { /* asked again: its promise is released by Python first */
        if (promised > 0) result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *entry = PyDict_GetItemWithError(self->entries, bitstream); /* borrowed */
    if (entry == NULL) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        goto done;
    }
    const RankTable *tables[4];
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
        PyErr_SetString(PyExc_TypeError, "FastPath: an entry holds 4 tables");
        goto done;
    }
    for (int i = 0; i < 4; i++) {
        if (entry_table(PyTuple_GET_ITEM(entry, i), i == 0, &tables[i]) < 0) goto done;
    }
    Py_ssize_t pod_len;
    const char *pod_text = PyUnicode_AsUTF8AndSize(pod, &pod_len);
    if (pod_text == NULL) goto done;
    Made made;
    int outcome = sample_make(s, tables[0], tables[1], tables[2], tables[3], self->limit,
                              crc32_of(pod_text, pod_len), &made);
    if (outcome != 0) {
        if (outcome > 0) result = Py_NewRef(Py_None); /* a node without published state asked about */
        goto done;
    }
    int settle = self->promised != NULL && made.first_len >= 0 && made.first_free;
    PyObject *whole = response(settle ? made.settled : made.plain);
    PyObject *chosen = settle ? PyUnicode_DecodeASCII(s + made.chosen_at, made.chosen_len, NULL) : Py_NewRef(Py_None);
    Py_DECREF(made.plain);
    Py_DECREF(made.settled);
    PyObject *written = whole != NULL && chosen != NULL ? PyObject_CallOneArg(write, whole) : NULL;
    if (written != NULL) {
        Py_DECREF(written);
        result = recorded(self, consumed, pod, bitstream, chosen, now, started);
    }
    Py_XDECREF(whole);
    Py_XDECREF(chosen);
done:
    Py_DECREF(head);
    return result;
}

static PyObject *fast_serve(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
    double started = seconds_now();
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "serve takes 2 arguments (data, write), got %zd", nargs);
        return NULL;
    }
    PyObject *arg = args[0], *write = args[1];
    if (!self->armed) Py_RETURN_NONE; /* nothing is kept back from the parser */
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t head = 0, body = 0;
    PyObject *result;
    int framed = frame(self, data.buf, data.len, &head, &body);
    if (framed < 0) {
        result = Py_NewRef(Py_None);
    } else if (framed == 0) {
        result = PyLong_FromLong(0);
    } else {
        result = answer_body(self, (const char *)data.buf + head, body, head + body, started, write);
    }
    PyBuffer_Release(&data);
    return result;
}

static PyObject *fast_keep(FastPath *self, PyObject *args) {
    if (books_keep(&self->books, args) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *fast_latency(FastPath *self, void *unused) { return books_latency(&self->books); }

/* ------------------------------------------------------------------------------------------ the type */

static PyObject *fast_arm(FastPath *self, PyObject *args) {
    PyObject *cache, *promised;
    double since, until;
    if (!PyArg_ParseTuple(args, "OddO:arm", &cache, &since, &until, &promised)) return NULL;
    if (promised != Py_None && !PyDict_Check(promised)) {
        PyErr_SetString(PyExc_TypeError, "arm: promised must be a dict or None");
        return NULL;
    }
    PyObject *changes = PyObject_GetAttr(cache, changes_name);
    if (changes == NULL) return NULL;
    if (!PyList_Check(changes)) {
        Py_DECREF(changes);
        PyErr_SetString(PyExc_TypeError, "arm: the cache's changes must be a list");
        return NULL;
    }
    Py_ssize_t seen = PyList_GET_SIZE(changes);
    if (cache != self->cache || changes != self->changes || seen != self->seen) PyDict_Clear(self->entries);
    Py_XSETREF(self->cache, Py_NewRef(cache));
    Py_XSETREF(self->changes, changes);
    Py_XSETREF(self->promised, promised == Py_None ? NULL : Py_NewRef(promised));
    self->seen = seen;
    self->since = since;
    self->until = until;
    self->armed = 1;
    Py_RETURN_NONE;
}

static PyObject *fast_disarm(FastPath *self, PyObject *unused) {
    self->armed = 0;
    Py_RETURN_NONE;
}

static PyObject *fast_clear_entries(FastPath *self, PyObject *unused) {
    self->armed = 0;
    PyDict_Clear(self->entries);
    Py_RETURN_NONE;
}

static PyObject *fast_put(FastPath *self, PyObject *args) {
    PyObject *bitstream, *base, *lifted, *skip, *unknown;
    if (!PyArg_ParseTuple(args, "UOOOO:put", &bitstream, &base, &lifted, &skip, &unknown)) return NULL;
    PyObject *members[4] = {base, lifted, skip, unknown};
    const RankTable *table;
    for (int i = 0; i < 4; i++) {
        if (entry_table(members[i], i == 0, &table) < 0) return NULL;
    }
    if (!self->armed) {
        PyErr_SetString(PyExc_RuntimeError, "put: arm first (entries hold for one state of the cache)");
        return NULL;
    }
    PyObject *entry = PyTuple_Pack(4, base, lifted, skip, unknown);
    if (entry == NULL) return NULL;
    int failed = PyDict_SetItem(self->entries, bitstream, entry);
    Py_DECREF(entry);
    if (failed < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *fast_drop(FastPath *self, PyObject *bitstream) {
    int held = PyDict_Contains(self->entries, bitstream);
    if (held < 0 || (held && PyDict_DelItem(self->entries, bitstream) < 0)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *fast_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"path", "clock", "limit", "max_body", "latency_bounds", NULL};
    const char *path;
    PyObject *clock, *bounds = NULL;
    int limit;
    Py_ssize_t max_body;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sOin|O:FastPath", kwlist, &path, &clock, &limit, &max_body,
                                     &bounds))
        return NULL;
    if (!PyCallable_Check(clock)) {
        PyErr_SetString(PyExc_TypeError, "FastPath: clock must be callable");
        return NULL;
    }
    if (limit < 1 || limit > MAX_LIMIT) {
        PyErr_Format(PyExc_ValueError, "FastPath: limit must be 1..%d, got %d", MAX_LIMIT, limit);
        return NULL;
    }
    if (path[0] != '/' || strpbrk(path, " \r\n?") != NULL) {
        PyErr_Format(PyExc_ValueError, "FastPath: %s is not a plain path", path);
        return NULL;
    }
    FastPath *self = (FastPath *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->line = PyBytes_FromFormat("POST %s HTTP/1.1\r\n", path);
    self->entries = PyDict_New();
    if (self->line == NULL || self->entries == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    if (bounds != NULL && books_bounds(&self->books, bounds) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->clock = Py_NewRef(clock);
    self->limit = limit;
    self->max_body = max_body;
    return (PyObject *)self;
}

static int fast_traverse(FastPath *self, visitproc visit, void *arg) {
    Py_VISIT(self->clock);
    Py_VISIT(self->cache);
    Py_VISIT(self->changes);
    Py_VISIT(self->promised);
    Py_VISIT(self->entries);
    return books_traverse(&self->books, visit, arg);
}

static int fast_clear(FastPath *self) {
    Py_CLEAR(self->clock);
    Py_CLEAR(self->cache);
    Py_CLEAR(self->changes);
    Py_CLEAR(self->promised);
    Py_CLEAR(self->entries);
    books_clear(&self->books);
    return 0;
}

static void fast_dealloc(FastPath *self) {
    PyObject_GC_UnTrack(self);
    fast_clear(self);
    Py_CLEAR(self->line);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fast_armed(FastPath *self, void *unused) { return PyBool_FromLong(self->armed); }

static PyObject *fast_bitstreams(FastPath *self, void *unused) { return PyFrozenSet_New(self->entries); }

static PyMethodDef fast_methods[] = {
    {"serve", (PyCFunction)(void (*)(void))fast_serve, METH_FASTCALL,
     "serve(data, write): None, 0, the bytes consumed or (consumed, error) (see the source)"},
    {"keep", (PyCFunction)fast_keep, METH_VARARGS,
     "keep(counted, counted_limit, unweighed, change_memory, weigh, promises): the objects each answer is "
     "recorded in; promises: (promises, by_pod, on_node, taken, full, reshaped, promise_type, ttl, record) or "
     "None (see _fastbooks.c)"},
    {"arm", (PyCFunction)fast_arm, METH_VARARGS,
     "arm(cache, since, until, promised): answer from the entries while the cache's log is as now and "
     "since <= clock() < until, leaving pods in ``promised`` (a dict, or None: no promises) to Python; "
     "entries made for another state of the cache are dropped"},
    {"disarm", (PyCFunction)fast_disarm, METH_NOARGS, "disarm(): answer nothing until armed again"},
    {"clear", (PyCFunction)fast_clear_entries, METH_NOARGS, "clear(): disarm and drop every entry"},
    {"put", (PyCFunction)fast_put, METH_VARARGS, "put(bitstream, base, lifted, skip, unknown): its tables"},
    {"drop", (PyCFunction)fast_drop, METH_O, "drop(bitstream): forget its tables"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fast_getset[] = {
    {"armed", (getter)fast_armed, NULL, "whether it answers (armed, and not disarmed since)", NULL},
    {"bitstreams", (getter)fast_bitstreams, NULL, "the bitstreams it holds tables for", NULL},
    {"latency", (getter)fast_latency, NULL, "(answers, seconds in all, answers per latency bucket)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef fast_members[] = {
    {"until", T_DOUBLE, offsetof(FastPath, until), READONLY, "answers only before this time"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "agent.extender._sample.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_dealloc = (destructor)fast_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "prioritize requests of one-slot pods answered from the request's bytes (see _fastpath.c)",
    .tp_traverse = (traverseproc)fast_traverse,
    .tp_clear = (inquiry)fast_clear,
    .tp_methods = fast_methods,
    .tp_getset = fast_getset,
    .tp_members = fast_members,
    .tp_new = fast_new,
};

int fastpath_ready(void) {
    crc_init();
    if (books_ready() < 0) return -1;
    changes_name = PyUnicode_InternFromString("changes");
    if (changes_name == NULL) return -1;
    return PyType_Ready(&FastPathType);
}
