/*
 * What the extender's fast path (_fastpath.c) records after an answer it wrote: what Python records after the
 * same answer (agent/extender/ranking.py, promises.py, metrics.py), into the same Python objects.
 *
 * In the real-scheduler bench the Python bookkeeping after each fast answer (counting the pod, promising the
 * copy, the metrics: some twenty Python calls) cost about as much CPU as the whole answer, its code and data
 * being out of the CPU's caches between calls, on a machine where the scheduler, the API server and etcd want
 * the same two cores. So it is done here, on the objects the Python side hands over (FastPath.keep, from
 * agent/extender/fastpath.py), which keeps them in place (a list or set it empties is emptied, not replaced):
 *
 *   the pod counted once in the request shares: ``counted`` (an OrderedDict, ``counted_limit`` pods at most, the
 *   oldest dropped) and ``unweighed`` (the bitstreams noted, weighed by ``weigh()`` once ``change_memory``);
 *
 *   the copy promised to the pod (Promises.record): ``by_pod`` pod -> promise (a ``promise_type`` tuple of
 *   bitstream, node, expiry ``now + ttl``), ``on_node`` node -> pods, ``taken`` bitstream -> node -> copies,
 *   and, when the node's free copies are now all promised, the node added to ``full[bitstream]`` (a
 *   HashedNames: its ``_names`` set and its ``table``). The rare cases go to ``record``, Python's own: a promise
 *   still pending, bitstreams reshaped and not yet forgotten, a bitstream's first fully promised node (its
 *   table is made then, and the fast path's entry for it dropped), a node state it cannot read;
 *
 *   the answer counted, with its latency, in the buckets the metrics use (read when scraped).
 */
#include "_fastbooks.h"

#include <string.h>

static PyObject *popitem_name, *pending_name, *nodes_name, *free_held_name, *names_name, *table_name, *put_name, *zero;

void books_time(Books *books, double seconds) {
    int i = 0;
    while (i < books->nbounds && books->bounds[i] < seconds) i++; /* as bisect_left: a bound is its bucket's largest */
    books->buckets[i]++;
    books->answers++;
    books->seconds += seconds;
}

PyObject *books_latency(const Books *books) {
    PyObject *counts = PyTuple_New(books->nbounds + 1);
    if (counts == NULL) return NULL;
    for (int i = 0; i <= books->nbounds; i++) {
        PyObject *count = PyLong_FromUnsignedLongLong(books->buckets[i]);
        if (count == NULL) {
            Py_DECREF(counts);
            return NULL;
        }
        PyTuple_SET_ITEM(counts, i, count);
    }
    return Py_BuildValue("(KdN)", books->answers, books->seconds, counts);
}

int books_bounds(Books *books, PyObject *bounds) {
    PyObject *seq = PySequence_Fast(bounds, "latency bounds must be a sequence of floats");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    double read[MAX_BOUNDS];
    int failed = n > MAX_BOUNDS;
    if (failed) PyErr_Format(PyExc_ValueError, "at most %d latency bounds, got %zd", MAX_BOUNDS, n);
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        read[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (read[i] == -1.0 && PyErr_Occurred()) failed = 1;
        else if (i > 0 && !(read[i] > read[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "latency bounds must increase");
            failed = 1;
        }
    }
    Py_DECREF(seq);
    if (failed) return -1;
    books->nbounds = (int)n;
    memcpy(books->bounds, read, sizeof(double) * (size_t)n);
    memset(books->buckets, 0, sizeof books->buckets);
    books->answers = 0;
    books->seconds = 0.0;
    return 0;
}

static int require(int ok, const char *what) {
    if (!ok) PyErr_Format(PyExc_TypeError, "keep: %s", what);
    return ok ? 0 : -1;
}

int books_keep(Books *books, PyObject *args) {
    PyObject *counted, *unweighed, *weigh, *books_of_promises;
    Py_ssize_t counted_limit, change_memory;
    if (!PyArg_ParseTuple(args, "OnOnOO:keep", &counted, &counted_limit, &unweighed, &change_memory, &weigh,
                          &books_of_promises))
        return -1;
    if (require(PyDict_Check(counted) && PyList_Check(unweighed) && PyCallable_Check(weigh),
                "counted must be a dict, unweighed a list, weigh callable") < 0 ||
        require(counted_limit > 0 && change_memory > 0, "counted_limit and change_memory must be positive") < 0)
        return -1;
    /* (promises, by_pod, on_node, taken, full, reshaped, promise_type, ttl, record), or None: no promises */
    PyObject *given[8] = {NULL};
    double ttl = 0.0;
    if (books_of_promises != Py_None) {
        if (require(PyTuple_Check(books_of_promises), "promises must be a tuple or None") < 0 ||
            !PyArg_ParseTuple(books_of_promises, "OOOOOOOdO:keep's promises", &given[0], &given[1], &given[2],
                              &given[3], &given[4], &given[5], &given[6], &ttl, &given[7]))
            return -1;
        PyObject *type = given[6];
        if (require(PyDict_Check(given[1]) && PyDict_Check(given[2]) && PyDict_Check(given[3]) &&
                        PyDict_Check(given[4]) && PyAnySet_Check(given[5]) && PyType_Check(type) &&
                        PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) && PyCallable_Check(given[7]),
                    "promises: by_pod, on_node, taken and full dicts, reshaped a set, promise_type a tuple type, "
                    "record callable") < 0)
            return -1;
    }
    Py_XSETREF(books->counted, Py_NewRef(counted));
    Py_XSETREF(books->unweighed, Py_NewRef(unweighed));
    Py_XSETREF(books->weigh, Py_NewRef(weigh));
    books->counted_limit = counted_limit;
    books->change_memory = change_memory;
    PyObject **held[8] = {&books->promises, &books->by_pod, &books->on_node,      &books->taken,
                          &books->full,     &books->reshaped, &books->promise_type, &books->record};
    for (int i = 0; i < 8; i++) Py_XSETREF(*held[i], Py_XNewRef(given[i]));
    books->ttl = ttl;
    return 0;
}

/* The pod counted in the request shares, once (ScoreBoard._count, ClusterFacts.note_request). */
static int count_pod(Books *books, PyObject *pod, PyObject *bitstream) {
    int seen = PyDict_Contains(books->counted, pod);
    if (seen != 0) return seen < 0 ? -1 : 0;
    if (PyDict_GET_SIZE(books->counted) >= books->counted_limit) {
        PyObject *oldest = PyObject_CallMethodOneArg(books->counted, popitem_name, Py_False);
        if (oldest == NULL) return -1;
        Py_DECREF(oldest);
    }
    if (PyObject_SetItem(books->counted, pod, Py_None) < 0 || PyList_Append(books->unweighed, bitstream) < 0)
        return -1;
    if (PyList_GET_SIZE(books->unweighed) >= books->change_memory) {
        PyObject *done = PyObject_CallNoArgs(books->weigh);
        if (done == NULL) return -1;
        Py_DECREF(done);
    }
    return 0;
}

/* The copies of ``bitstream`` promised on ``node`` so far (into *taken) and whether one more promise leaves none
 * free there (into *fills): 1 when this file can record it, 0 when Python's ``record`` must, -1 on error. */
static int plain_case(Books *books, PyObject *cache, PyObject *bitstream, PyObject *node, long *taken, int *fills) {
    PyObject *pending = PyObject_GetAttr(books->promises, pending_name);
    if (pending == NULL) return -1;
    int plain = pending == Py_None && PySet_GET_SIZE(books->reshaped) == 0;
    Py_DECREF(pending);
    if (!plain) return 0;
    *taken = 0;
    PyObject *per_node = PyDict_GetItemWithError(books->taken, bitstream);
    if (per_node != NULL) {
        PyObject *count = PyDict_GetItemWithError(per_node, node);
        if (count != NULL) {
            *taken = PyLong_AsLong(count);
            if (*taken == -1 && PyErr_Occurred()) return -1;
        }
    }
    if (PyErr_Occurred()) return -1;
    PyObject *nodes = PyObject_GetAttr(cache, nodes_name);
    if (nodes == NULL) return -1;
    int outcome = 0;
    if (PyDict_Check(nodes)) {
        PyObject *state = PyDict_GetItemWithError(nodes, node); /* borrowed, while nodes is held */
        long free = 0;
        outcome = 1;
        if (state != NULL) {
            PyObject *held = PyObject_GetAttr(state, free_held_name);
            if (held == NULL) outcome = -1;
            else if (!PyDict_Check(held)) outcome = 0;
            else {
                PyObject *copies = PyDict_GetItemWithError(held, bitstream);
                if (copies != NULL) free = PyLong_AsLong(copies);
                if (PyErr_Occurred()) outcome = -1;
            }
            Py_XDECREF(held);
        } else if (PyErr_Occurred()) {
            outcome = -1;
        }
        *fills = state == NULL || free <= *taken + 1;
    }
    Py_DECREF(nodes);
    if (outcome == 1 && *fills) { /* a bitstream's first fully promised node makes its table: Python does that */
        PyObject *full = PyDict_GetItemWithError(books->full, bitstream);
        if (full == NULL) outcome = PyErr_Occurred() ? -1 : 0;
    }
    return outcome;
}

/* ``value`` under ``key`` in ``dict``, made by ``make`` when missing (dict.setdefault): borrowed, NULL on error. */
static PyObject *setdefault(PyObject *dict, PyObject *key, PyObject *(*make)(PyObject *)) {
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value != NULL || PyErr_Occurred()) return value;
    value = make(NULL);
    if (value == NULL) return NULL;
    int failed = PyDict_SetItem(dict, key, value);
    Py_DECREF(value); /* the dict holds it */
    return failed < 0 ? NULL : value;
}

static PyObject *new_dict(PyObject *unused) { return PyDict_New(); }

/* The copy on ``node`` promised to ``pod`` (Promises.record). */
static int promise(Books *books, PyObject *cache, PyObject *pod, PyObject *bitstream, PyObject *node, double now) {
    long taken = 0;
    int fills = 0;
    int plain = plain_case(books, cache, bitstream, node, &taken, &fills);
    if (plain < 0) return -1;
    if (!plain) {
        PyObject *done = PyObject_CallFunction(books->record, "OOOd", pod, node, bitstream, now);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    PyObject *expires = PyFloat_FromDouble(now + books->ttl);
    if (expires == NULL) return -1;
    PyTypeObject *type = (PyTypeObject *)books->promise_type; /* a tuple subclass: made as tuple.__new__ makes it */
    PyObject *made = type->tp_alloc(type, 3);
    if (made == NULL) {
        Py_DECREF(expires);
        return -1;
    }
    PyTuple_SET_ITEM(made, 0, Py_NewRef(bitstream));
    PyTuple_SET_ITEM(made, 1, Py_NewRef(node));
    PyTuple_SET_ITEM(made, 2, expires);
    int failed = PyObject_SetItem(books->by_pod, pod, made); /* OrderedDict: put last */
    Py_DECREF(made);
    if (failed < 0) return -1;
    PyObject *pods = setdefault(books->on_node, node, PySet_New);
    PyObject *per_node = setdefault(books->taken, bitstream, new_dict);
    if (pods == NULL || per_node == NULL || PySet_Add(pods, pod) < 0) return -1;
    PyObject *count = PyLong_FromLong(taken + 1);
    if (count == NULL) return -1;
    failed = PyDict_SetItem(per_node, node, count);
    Py_DECREF(count);
    if (failed < 0 || !fills) return failed;
    PyObject *full = PyDict_GetItemWithError(books->full, bitstream); /* HashedNames.add(node) */
    if (full == NULL) return -1;
    PyObject *names = PyObject_GetAttr(full, names_name);
    if (names == NULL) return -1;
    failed = PySet_Add(names, node);
    Py_DECREF(names);
    if (failed < 0) return -1;
    PyObject *table = PyObject_GetAttr(full, table_name);
    if (table == NULL) return -1;
    PyObject *call[3] = {table, node, zero};
    PyObject *put = table == Py_None ? Py_NewRef(Py_None) : PyObject_VectorcallMethod(put_name, call, 3, NULL);
    Py_DECREF(table);
    Py_XDECREF(put);
    return put == NULL ? -1 : 0;
}

int books_record(Books *books, PyObject *cache, PyObject *pod, PyObject *bitstream, PyObject *chosen, double now) {
    if (books->counted != NULL && count_pod(books, pod, bitstream) < 0) return -1;
    if (chosen == Py_None || books->promises == NULL) return 0;
    return promise(books, cache, pod, bitstream, chosen, now);
}

int books_traverse(Books *books, visitproc visit, void *arg) {
    Py_VISIT(books->counted);
    Py_VISIT(books->unweighed);
    Py_VISIT(books->weigh);
    Py_VISIT(books->promises);
    Py_VISIT(books->by_pod);
    Py_VISIT(books->on_node);
    Py_VISIT(books->taken);
    Py_VISIT(books->full);
    Py_VISIT(books->reshaped);
    Py_VISIT(books->promise_type);
    Py_VISIT(books->record);
    return 0;
}

void books_clear(Books *books) {
    Py_CLEAR(books->counted);
    Py_CLEAR(books->unweighed);
    Py_CLEAR(books->weigh);
    Py_CLEAR(books->promises);
    Py_CLEAR(books->by_pod);
    Py_CLEAR(books->on_node);
    Py_CLEAR(books->taken);
    Py_CLEAR(books->full);
    Py_CLEAR(books->reshaped);
    Py_CLEAR(books->promise_type);
    Py_CLEAR(books->record);
}

int books_ready(void) {
    PyObject **names[] = {&popitem_name, &pending_name, &nodes_name, &free_held_name, &names_name, &table_name,
                          &put_name};
    const char *texts[] = {"popitem", "_pending", "nodes", "free_held", "_names", "table", "put"};
    zero = PyLong_FromLong(0);
    if (zero == NULL) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i] = PyUnicode_InternFromString(texts[i]);
        if (*names[i] == NULL) return -1;
    }
    return 0;
}
