/*
 * The pod of a prioritize call, read from the request's bytes for the common case: a pod that asks one slot
 * of one bitstream.
 *
 * one_slot_pod(body, end, start) reads body[:end] as the members of the request object before its NodeNames
 * (as one_slot_head in _sample.c splits it, the names array at start) and returns (pod, bitstream, start)
 * when the pod asks exactly one slot, of one named bitstream, and nothing else: "namespace/name" as
 * agent/extender/wire.py names a pod, and the bitstream from the pod's annotations (the container's own, else
 * the pod's). It returns None for anything else: another kind of pod, a DRA pod, and every body it is not
 * sure about (a duplicate key on the way, an escape in a key or value it reads, a \u escape or a byte above
 * 0x7f anywhere, a number it would have to judge, nesting past MAX_DEPTH, a quantity other than "0" or "1").
 * The caller then parses the body whole (wire.parse_extender_args), which gives the same answer or the error
 * that names the problem: this reader never refuses, it only declines.
 *
 * Every value it passes over is checked as JSON all the same, so a body it answers for is one the whole
 * parser accepts.
 */
#include "_podread.h"

#include <string.h>

#define MAX_DEPTH 64
#define MAX_CONTAINERS 16
#define MAX_NAMED 16

typedef struct {
    const char *at;
    Py_ssize_t len;
} Span;

typedef struct {
    const char *s, *end;
    int depth;
} Reader;

/* A container's name and slots (-1: no slot request found yet). */
typedef struct {
    Span name;
    int slots;
} Container;

typedef struct {
    Span name, namespace;
    int has_name, has_namespace;
    Span pod_bitstream; /* the pod's own annotation */
    int has_pod_bitstream;
    Span named_key[MAX_NAMED], named_value[MAX_NAMED]; /* "example.com/fpga-bitstream.<container>" */
    int nnamed;
    Container containers[MAX_CONTAINERS];
    int ncontainers;
} Pod;

static const char ANNOTATION[] = "example.com/fpga-bitstream";
static const char SLOT_RESOURCE[] = "example.com/fpga-slot";

static inline void skip_ws(Reader *r) {
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r')) r->s++;
}

/* Expect the byte c (after whitespace). */
static inline int expect(Reader *r, char c) {
    skip_ws(r);
    if (r->s >= r->end || *r->s != c) return -1;
    r->s++;
    return 0;
}

/* A string at r->s ('"'): its inside into out; *plain is 1 when it holds no escape. -1: not one we accept. */
static int read_string(Reader *r, Span *out, int *plain) {
    if (r->s >= r->end || *r->s != '"') return -1;
    const char *p = ++r->s;
    int escaped = 0;
    while (p < r->end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            out->at = r->s;
            out->len = p - r->s;
            *plain = !escaped;
            r->s = p + 1;
            return 0;
        }
        if (c < 0x20 || c >= 0x80) return -1;
        if (c == '\\') {
            if (p + 1 >= r->end) return -1;
            char e = p[1];
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') return -1;
            escaped = 1;
            p += 2;
            continue;
        }
        p++;
    }
    return -1;
}

/* A number: JSON's grammar, short, no exponent (a value the whole parser reads the same, whatever it is). */
static int skip_number(Reader *r) {
    const char *p = r->s, *start = p;
    if (p < r->end && *p == '-') p++;
    if (p >= r->end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < r->end && *p >= '0' && *p <= '9') p++;
    } else {
        return -1;
    }
    if (p < r->end && *p == '.') {
        p++;
        const char *digits = p;
        while (p < r->end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return -1;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) return -1;
    if (p - start > 15) return -1;
    r->s = p;
    return 0;
}

static int skip_literal(Reader *r, const char *word, Py_ssize_t n) {
    if (r->end - r->s < n || memcmp(r->s, word, (size_t)n) != 0) return -1;
    r->s += n;
    return 0;
}

/* Into an object or array: its opening byte (after whitespace) passed; 1 when it closes at once (passed too),
 * 0 when items follow, -1 otherwise (or nested past MAX_DEPTH). */
static int open_container(Reader *r, char open, char close) {
    if (expect(r, open) < 0 || ++r->depth > MAX_DEPTH) return -1;
    skip_ws(r);
    if (r->s < r->end && *r->s == close) {
        r->s++;
        r->depth--;
        return 1;
    }
    return 0;
}

/* After an item: 1 when the container closes (passed), 0 after a ',', -1 otherwise. */
static int next_or_close(Reader *r, char close) {
    skip_ws(r);
    if (r->s >= r->end) return -1;
    if (*r->s == close) {
        r->s++;
        r->depth--;
        return 1;
    }
    return *r->s++ == ',' ? 0 : -1;
}

static int skip_value(Reader *r);

/* The members of an object or the items of an array, its opening byte next; each value skipped. */
static int skip_container(Reader *r, char open, char close, int keyed) {
    int state = open_container(r, open, close);
    while (state == 0) {
        if (keyed) {
            Span key;
            int plain;
            skip_ws(r);
            if (read_string(r, &key, &plain) < 0 || expect(r, ':') < 0) return -1;
        }
        if (skip_value(r) < 0) return -1;
        state = next_or_close(r, close);
    }
    return state < 0 ? -1 : 0;
}

static int skip_value(Reader *r) {
    skip_ws(r);
    if (r->s >= r->end) return -1;
    Span ignored;
    int plain;
    switch (*r->s) {
        case '{':
            return skip_container(r, '{', '}', 1);
        case '[':
            return skip_container(r, '[', ']', 0);
        case '"':
            return read_string(r, &ignored, &plain);
        case 'n':
            return skip_literal(r, "null", 4);
        case 't':
            return skip_literal(r, "true", 4);
        case 'f':
            return skip_literal(r, "false", 5);
        default:
            return skip_number(r);
    }
}

static inline int is_key(Span key, const char *word) {
    size_t n = strlen(word);
    return (size_t)key.len == n && memcmp(key.at, word, n) == 0;
}

/* Whether the value ahead is null (then passed over). */
static inline int take_null(Reader *r) {
    skip_ws(r);
    if (r->end - r->s >= 4 && memcmp(r->s, "null", 4) == 0) {
        r->s += 4;
        return 1;
    }
    return 0;
}

/*
 * Walk an object's members: for each, read_member(r, key, state) reads the value (returns -1 to decline);
 * keys named in ``once`` may appear once only (the whole parser keeps the last of duplicates: declined).
 * The object must be next (after whitespace).
 */
typedef int (*Member)(Reader *r, Span key, void *state);

static int walk_object(Reader *r, Member read_member, void *state, const char *const *once, int nonce) {
    unsigned seen = 0;
    int at = open_container(r, '{', '}');
    while (at == 0) {
        Span key;
        int plain;
        skip_ws(r);
        if (read_string(r, &key, &plain) < 0 || !plain || expect(r, ':') < 0) return -1;
        for (int i = 0; i < nonce; i++) {
            if (is_key(key, once[i])) {
                if (seen & (1u << i)) return -1;
                seen |= 1u << i;
            }
        }
        if (read_member(r, key, state) < 0) return -1;
        at = next_or_close(r, '}');
    }
    return at < 0 ? -1 : 0;
}

/* A plain string into out, or null (*given stays 0); anything else declines. */
static int plain_or_null(Reader *r, Span *out, int *given) {
    if (take_null(r)) return 0;
    int plain;
    if (read_string(r, out, &plain) < 0 || !plain) return -1;
    *given = 1;
    return 0;
}

/* --- the pod's annotations */

static int annotation(Reader *r, Span key, void *state) {
    Pod *pod = state;
    Span value;
    int plain;
    skip_ws(r);
    if (read_string(r, &value, &plain) < 0) return -1; /* every value must be a string */
    Py_ssize_t n = (Py_ssize_t)sizeof ANNOTATION - 1;
    if (key.len < n || memcmp(key.at, ANNOTATION, (size_t)n) != 0) return 0;
    if (key.len == n) {
        if (pod->has_pod_bitstream || !plain) return -1;
        pod->pod_bitstream = value;
        pod->has_pod_bitstream = 1;
        return 0;
    }
    if (key.at[n] != '.') return 0;
    if (!plain || pod->nnamed == MAX_NAMED) return -1;
    Span suffix = {key.at + n + 1, key.len - n - 1};
    for (int i = 0; i < pod->nnamed; i++) {
        if (pod->named_key[i].len == suffix.len && memcmp(pod->named_key[i].at, suffix.at, (size_t)suffix.len) == 0)
            return -1;
    }
    pod->named_key[pod->nnamed] = suffix;
    pod->named_value[pod->nnamed++] = value;
    return 0;
}

static int metadata_member(Reader *r, Span key, void *state) {
    Pod *pod = state;
    if (is_key(key, "name")) return plain_or_null(r, &pod->name, &pod->has_name);
    if (is_key(key, "namespace")) return plain_or_null(r, &pod->namespace, &pod->has_namespace);
    if (is_key(key, "annotations")) {
        if (take_null(r)) return 0;
        return walk_object(r, annotation, pod, NULL, 0);
    }
    return skip_value(r);
}

/* --- the pod's containers */

/* The slot count of a limits or requests object into *slots (-1 when it names none). */
static int slot_request(Reader *r, Span key, void *state) {
    int *slots = state;
    if (!is_key(key, SLOT_RESOURCE)) return skip_value(r);
    if (take_null(r)) return 0; /* as if not given */
    Span value;
    int plain;
    if (read_string(r, &value, &plain) < 0 || !plain || value.len != 1) return -1;
    if (value.at[0] != '0' && value.at[0] != '1') return -1;
    *slots = value.at[0] - '0';
    return 0;
}

typedef struct {
    int limits, requests;
} Resources;

static const char *const RESOURCE_KINDS[] = {"limits", "requests"};

static int resources_member(Reader *r, Span key, void *state) {
    Resources *res = state;
    int *slots = is_key(key, "limits") ? &res->limits : is_key(key, "requests") ? &res->requests : NULL;
    if (slots == NULL) return skip_value(r);
    if (take_null(r)) return 0;
    static const char *const once[] = {SLOT_RESOURCE};
    return walk_object(r, slot_request, slots, once, 1);
}

static int container_member(Reader *r, Span key, void *state) {
    Container *c = state;
    if (is_key(key, "name")) {
        skip_ws(r);
        if (r->s < r->end && *r->s == '"') {
            int plain;
            if (read_string(r, &c->name, &plain) < 0 || !plain) return -1;
            return 0;
        }
        c->name = (Span){NULL, 0}; /* not a string: the container counts as unnamed */
        return skip_value(r);
    }
    if (is_key(key, "resources")) {
        if (take_null(r)) return 0;
        Resources res = {-1, -1};
        if (walk_object(r, resources_member, &res, RESOURCE_KINDS, 2) < 0) return -1;
        c->slots = res.limits >= 0 ? res.limits : res.requests;
        return 0;
    }
    return skip_value(r);
}

static int containers(Reader *r, Pod *pod) {
    static const char *const once[] = {"name", "resources"};
    if (take_null(r)) return 0;
    int at = open_container(r, '[', ']');
    while (at == 0) {
        if (pod->ncontainers == MAX_CONTAINERS) return -1;
        Container *c = &pod->containers[pod->ncontainers++];
        *c = (Container){{NULL, 0}, -1};
        if (walk_object(r, container_member, c, once, 2) < 0) return -1;
        at = next_or_close(r, ']');
    }
    return at < 0 ? -1 : 0;
}

static int spec_member(Reader *r, Span key, void *state) {
    Pod *pod = state;
    if (is_key(key, "containers") || is_key(key, "initContainers")) return containers(r, pod);
    if (is_key(key, "resourceClaims")) { /* a DRA pod unless null or empty */
        if (take_null(r)) return 0;
        if (expect(r, '[') < 0) return -1;
        return expect(r, ']');
    }
    return skip_value(r);
}

static int pod_member(Reader *r, Span key, void *state) {
    static const char *const meta_once[] = {"name", "namespace", "annotations"};
    static const char *const spec_once[] = {"containers", "initContainers", "resourceClaims"};
    if (is_key(key, "metadata")) {
        if (take_null(r)) return 0;
        return walk_object(r, metadata_member, state, meta_once, 3);
    }
    if (is_key(key, "spec")) {
        if (take_null(r)) return 0;
        return walk_object(r, spec_member, state, spec_once, 3);
    }
    return skip_value(r);
}

static const char *const POD_ONCE[] = {"metadata", "spec"};

/* The request's members before its names: '{', members, the end (where the caller's '}' closes it). */
static int read_top(Reader *r, Pod *pod) {
    int pods = 0;
    if (expect(r, '{') < 0) return -1;
    for (;;) {
        Span key;
        int plain;
        skip_ws(r);
        if (read_string(r, &key, &plain) < 0 || !plain || expect(r, ':') < 0) return -1;
        if (is_key(key, "Pod")) {
            if (pods++ > 0) return -1;
            if (walk_object(r, pod_member, pod, POD_ONCE, 2) < 0) return -1;
        } else if (skip_value(r) < 0) {
            return -1;
        }
        skip_ws(r);
        if (r->s == r->end) return pods == 1 ? 0 : -1;
        if (*r->s++ != ',') return -1;
    }
}

/* The bitstream a container asks for: its own annotation when not empty, else the pod's. A container
 * without a name (or with one that is not a string) reads "example.com/fpga-bitstream." itself. */
static int bitstream_of(const Pod *pod, const Container *c, Span *out) {
    for (int i = 0; i < pod->nnamed; i++) {
        const Span *k = &pod->named_key[i];
        if (k->len == c->name.len && (k->len == 0 || memcmp(k->at, c->name.at, (size_t)k->len) == 0) &&
            pod->named_value[i].len > 0) {
            *out = pod->named_value[i];
            return 1;
        }
    }
    if (pod->has_pod_bitstream && pod->pod_bitstream.len > 0) {
        *out = pod->pod_bitstream;
        return 1;
    }
    return 0;
}

PyObject *one_slot_pod(const char *body, Py_ssize_t end, Py_ssize_t start) {
    Pod pod;
    memset(&pod, 0, sizeof pod);
    Reader r = {body, body + end, 0};
    const Container *wanted = NULL;
    Span bitstream;
    int fits = read_top(&r, &pod) == 0;
    for (int i = 0; fits && i < pod.ncontainers; i++) {
        const Container *c = &pod.containers[i];
        if (c->slots <= 0) continue;
        fits = wanted == NULL;
        wanted = c;
    }
    if (!fits || wanted == NULL || !bitstream_of(&pod, wanted, &bitstream)) return Py_NewRef(Py_None);
    Span ns = pod.has_namespace && pod.namespace.len > 0 ? pod.namespace : (Span){"default", 7};
    Span name = pod.has_name && pod.name.len > 0 ? pod.name : (Span){"?", 1};
    PyObject *key = PyUnicode_New(ns.len + 1 + name.len, 127);
    if (key == NULL) return NULL;
    char *k = (char *)PyUnicode_DATA(key);
    memcpy(k, ns.at, (size_t)ns.len);
    k[ns.len] = '/';
    memcpy(k + ns.len + 1, name.at, (size_t)name.len);
    return Py_BuildValue("(Ns#n)", key, bitstream.at, bitstream.len, start);
}
