/* One deployment's event loop, compiled: trimtab.sim.fast's ``run`` (see its docstring for when it applies).

The same state machine as ``trimtab.sim.replica.Replica`` (start_step, finish_step, _retire, _preempt,
enqueue) and the event loop of ``trimtab.sim.engine.Simulation`` (_loop, _on_event, _on_arrival, _admit,
least_request), for the replicas that have neither a prefix cache nor a KV tier nor a timeline: the same
integer and float operations in the same order, so the same times and counters to the last bit
(tests/sim/test_fast_loop.py compares every field with the Python loop). The step times are the cost
model's own: ``it`` (its ``iteration_s``) for steps with prompt tokens and ``line`` (the replica's
``_linear`` table) for decode-only steps; this file computes no step time of its own.

Events are taken in time order, one step at a time (the Python loop's ``coast`` shortcut gives the same
floats). A run that reaches the drain limit (an event past it) stops there, as the Python loop does: its
requests and counters as they stand, the requests still queued or running left in no Python queue (nothing
reads a finished run's queues). Build flags: -ffp-contract=off (no fused multiply-add: Python rounds each
operation). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t rid, w, dep, rep, isl, osl, prompt, done, gen, start, c, epoch, preempted, status;
    double arrival, t_sched, t_first, t_done;
    int64_t qprev, qnext;   /* waiting or prefilling (a request is in one at most) */
    int64_t rprev, rnext;   /* running, in admission order */
} Req;

typedef struct { int64_t step, rid, epoch, idx; } DEntry;   /* a completion: (step, rid, epoch, request) */
typedef struct { double t; int64_t seq, rep; } EEntry;       /* an engine step's end */

typedef struct { int64_t head, tail, len; } List;            /* a doubly linked list of request indices */
typedef struct { double a, s; int ok; } Line;       /* a batch's step line; ok: 0 unknown, 1 linear, 2 not */

typedef struct {
    int64_t k, busy, n_dec, C, kv_pref, Csh, p_step, kv_max, preemptions, steps;
    double t0, busy_s, prefill_s, kv_area, batch_area;
    List waiting, prefilling, running;
    DEntry *dheap; int64_t dn, dcap;
    int64_t *sched_idx, *sched_c, sn, scap;
    int64_t *done, donen, donecap;
} Rep;

typedef struct {
    Req *q;
    Rep *reps;
    int64_t nrep;
    double cap, admit_cap;
    int64_t mns, mbt;
    int ahead, seqs_arg;
    PyObject *it, *line;
    Line *lin; int64_t lin_n;   /* per decode batch */
    EEntry *eheap; int64_t en, ecap, seq;
    int error;
} Loop;

static int grow(void **p, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *np_ = realloc(*p, (size_t)c * size);
    if (!np_) { PyErr_NoMemory(); return -1; }
    *p = np_;
    *cap = c;
    return 0;
}

/* ---- lists over the requests' link fields (q: waiting / prefilling; r: running) */
#define LIST_OPS(NAME, PREV, NEXT)                                                                       \
    static inline void NAME##_append(Req *q, List *l, int64_t i) {                                       \
        q[i].PREV = l->tail; q[i].NEXT = -1;                                                             \
        if (l->tail >= 0) q[l->tail].NEXT = i; else l->head = i;                                         \
        l->tail = i; l->len++;                                                                           \
    }                                                                                                    \
    static inline void NAME##_appendleft(Req *q, List *l, int64_t i) {                                   \
        q[i].NEXT = l->head; q[i].PREV = -1;                                                             \
        if (l->head >= 0) q[l->head].PREV = i; else l->tail = i;                                         \
        l->head = i; l->len++;                                                                           \
    }                                                                                                    \
    static inline void NAME##_remove(Req *q, List *l, int64_t i) {                                       \
        int64_t p = q[i].PREV, n = q[i].NEXT;                                                            \
        if (p >= 0) q[p].NEXT = n; else l->head = n;                                                     \
        if (n >= 0) q[n].PREV = p; else l->tail = p;                                                     \
        q[i].PREV = q[i].NEXT = -1; l->len--;                                                            \
    }
LIST_OPS(ql, qprev, qnext)
LIST_OPS(rl, rprev, rnext)

/* ---- heaps (heapq's order): completions by (step, rid, epoch); step ends by (time, sequence) */
static inline int dless(const DEntry *a, const DEntry *b) {
    if (a->step != b->step) return a->step < b->step;
    if (a->rid != b->rid) return a->rid < b->rid;
    return a->epoch < b->epoch;
}

static inline int eless(const EEntry *a, const EEntry *b) {
    if (a->t != b->t) return a->t < b->t;
    return a->seq < b->seq;
}

#define HEAP_OPS(NAME, T, LESS)                                                                          \
    static int NAME##_push(T **h, int64_t *n, int64_t *cap, T e) {                                       \
        if (grow((void **)h, cap, *n + 1, sizeof(T))) return -1;                                         \
        int64_t i = (*n)++;                                                                              \
        while (i > 0) {                                                                                  \
            int64_t p = (i - 1) / 2;                                                                     \
            if (!LESS(&e, &(*h)[p])) break;                                                              \
            (*h)[i] = (*h)[p];                                                                           \
            i = p;                                                                                       \
        }                                                                                                \
        (*h)[i] = e;                                                                                     \
        return 0;                                                                                        \
    }                                                                                                    \
    static T NAME##_pop(T *h, int64_t *n) {                                                              \
        T top = h[0], e = h[--(*n)];                                                                     \
        int64_t i = 0, m = *n;                                                                           \
        for (;;) {                                                                                       \
            int64_t c = 2 * i + 1;                                                                       \
            if (c >= m) break;                                                                           \
            if (c + 1 < m && LESS(&h[c + 1], &h[c])) c++;                                                \
            if (!LESS(&h[c], &e)) break;                                                                 \
            h[i] = h[c];                                                                                 \
            i = c;                                                                                       \
        }                                                                                                \
        if (m) h[i] = e;                                                                                 \
        return top;                                                                                      \
    }
HEAP_OPS(dheap, DEntry, dless)
HEAP_OPS(eheap, EEntry, eless)

static int dpush(Rep *r, DEntry e) { return dheap_push(&r->dheap, &r->dn, &r->dcap, e); }
static DEntry dpop(Rep *r) { return dheap_pop(r->dheap, &r->dn); }

static int epush(Loop *L, double t, int64_t rep) {
    EEntry e = {t, L->seq++, rep};
    return eheap_push(&L->eheap, &L->en, &L->ecap, e);
}

static EEntry epop(Loop *L) { return eheap_pop(L->eheap, &L->en); }

/* ---- the cost model, through Python */
static double call_it(Loop *L, int64_t n, double ctx, int64_t ptok, double pctx, int64_t m, int with_m) {
    /* iteration_s(n, ctx, ptok, pctx[, m]) with the argument types the Python replica passes: n, ptok and m
       as int, the contexts as float (ptok 0: the float 0.0) */
    PyObject *res;
    PyObject *a0 = PyLong_FromLongLong(n);
    PyObject *a1 = PyFloat_FromDouble(ctx);
    PyObject *a2 = ptok ? PyLong_FromLongLong(ptok) : PyFloat_FromDouble(0.0);
    PyObject *a3 = PyFloat_FromDouble(pctx);
    PyObject *a4 = with_m ? PyLong_FromLongLong(m) : NULL;
    if (!a0 || !a1 || !a2 || !a3 || (with_m && !a4)) {
        res = NULL;
    } else {
        PyObject *args[5] = {a0, a1, a2, a3, a4};
        res = PyObject_Vectorcall(L->it, args, with_m ? 5 : 4, NULL);
    }
    Py_XDECREF(a0); Py_XDECREF(a1); Py_XDECREF(a2); Py_XDECREF(a3); Py_XDECREF(a4);
    if (!res) { L->error = 1; return 0.0; }
    double v = PyFloat_AsDouble(res);
    Py_DECREF(res);
    if (v == -1.0 && PyErr_Occurred()) L->error = 1;
    return v;
}

/* The decode-only step of n requests at total context ``ctx`` (own KV plus cached prefixes): the replica's
   line (T(n, 0), slope) when the cost model is linear in the context, else a call. */
static double decode_dt(Loop *L, int64_t n, int64_t ctx) {
    if (n >= L->lin_n) {
        int64_t old = L->lin_n, want = n + 1 > 2 * old ? n + 1 : 2 * old;
        Line *g = realloc(L->lin, (size_t)want * sizeof(Line));
        if (!g) { PyErr_NoMemory(); L->error = 1; return 0.0; }
        memset(g + old, 0, (size_t)(want - old) * sizeof(Line));
        L->lin = g;
        L->lin_n = want;
    }
    Line *g = &L->lin[n];
    if (!g->ok) {
        PyObject *res = PyObject_CallFunction(L->line, "L", (long long)n);
        if (!res) { L->error = 1; return 0.0; }
        g->ok = 2;
        if (PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 2) {
            g->a = PyFloat_AsDouble(PyTuple_GET_ITEM(res, 0));
            g->s = PyFloat_AsDouble(PyTuple_GET_ITEM(res, 1));
            g->ok = 1;
        }
        Py_DECREF(res);
        if (PyErr_Occurred()) { L->error = 1; return 0.0; }
    }
    if (g->ok == 1) return g->a + g->s * ((double)ctx / (double)n);
    return call_it(L, n, (double)ctx / (double)n, 0, 0.0, 0, 0);
}

/* ---- one replica (Replica's methods) */
static void preempt(Loop *L, Rep *R) {
    Req *q = L->q;
    int64_t i = R->running.tail;
    rl_remove(q, &R->running, i);
    Req *r = &q[i];
    if (r->start >= 0) {
        int64_t gen = r->gen + (R->k - r->start - 1);
        R->n_dec -= 1;
        R->C -= r->c;
        r->epoch += 1;
        r->start = -1;
        r->gen = gen;
    } else {
        ql_remove(q, &R->prefilling, i);
        R->kv_pref -= r->prompt;
    }
    r->prompt = r->isl + r->gen;
    r->done = 0;
    r->preempted += 1;
    R->preemptions += 1;
    ql_appendleft(q, &R->waiting, i);
}

static double begin(Rep *R, double t, double dt, int64_t n, int64_t ptok, int64_t kv) {
    R->busy = 1;
    R->steps += 1;
    R->p_step = ptok;
    R->t0 = t;
    R->busy_s += dt;
    R->kv_area += (double)kv * dt;
    R->batch_area += (double)n * dt;
    if (kv > R->kv_max) R->kv_max = kv;
    if (ptok) R->prefill_s += dt;
    return t + dt;
}

static int sched_add(Rep *R, int64_t i, int64_t c) {
    if (R->sn == R->scap) {
        int64_t want = R->scap ? 2 * R->scap : 16;
        int64_t *a = realloc(R->sched_idx, (size_t)want * sizeof(int64_t));
        if (!a) { PyErr_NoMemory(); return -1; }
        R->sched_idx = a;
        int64_t *b = realloc(R->sched_c, (size_t)want * sizeof(int64_t));
        if (!b) { PyErr_NoMemory(); return -1; }
        R->sched_c = b;
        R->scap = want;
    }
    R->sched_idx[R->sn] = i;
    R->sched_c[R->sn] = c;
    R->sn++;
    return 0;
}

static double start_step(Loop *L, Rep *R, double t) {
    Req *q = L->q;
    int64_t k = R->k;
    while (R->n_dec && (double)(R->C + R->n_dec * (k + 1) + R->kv_pref) > L->cap) preempt(L, R);
    int64_t n = R->n_dec;
    if (!R->waiting.len && !R->prefilling.len) {
        if (n == 0) { R->busy = 0; return -1.0; }
        R->sn = 0;
        int64_t kv_dec = R->C + n * k;
        double dt = decode_dt(L, n, kv_dec + R->Csh);
        return begin(R, t, dt, n, 0, kv_dec + R->kv_pref);
    }
    int64_t kv_dec = R->C + n * k;
    int64_t budget = L->mbt - n;
    R->sn = 0;
    int64_t ptok = 0;
    double attn = 0.0;
    if (budget > 0) {
        for (int64_t i = R->prefilling.head; i >= 0; i = q[i].qnext) {
            Req *r = &q[i];
            int64_t c = r->prompt - r->done;
            if (c > budget) c = budget;
            if (sched_add(R, i, c)) { L->error = 1; return -1.0; }
            attn += (double)c * ((double)r->done + (double)c * 0.5);
            ptok += c;
            budget -= c;
            if (budget <= 0) break;
        }
        double ready = (L->ahead && R->busy && (n || R->sn)) ? R->t0 : INFINITY;
        while (budget > 0 && R->waiting.len && R->running.len < L->mns) {
            int64_t i = R->waiting.head;
            Req *r = &q[i];
            if (r->arrival > ready) break;
            if (R->running.len && (double)(kv_dec + n + R->kv_pref + r->prompt) > L->admit_cap) break;
            ql_remove(q, &R->waiting, i);
            rl_append(q, &R->running, i);
            ql_append(q, &R->prefilling, i);
            R->kv_pref += r->prompt;
            if (r->t_sched < 0) r->t_sched = t;
            int64_t c = r->prompt < budget ? r->prompt : budget;
            if (sched_add(R, i, c)) { L->error = 1; return -1.0; }
            attn += (double)c * ((double)c * 0.5);
            ptok += c;
            budget -= c;
        }
    }
    if (n == 0 && ptok == 0) { R->busy = 0; return -1.0; }
    double dt;
    if (ptok == 0) {
        dt = decode_dt(L, n, kv_dec + R->Csh);
    } else {
        double ctx = n ? (double)(kv_dec + R->Csh) / (double)n : 0.0;
        double m = (double)R->sn;
        if (L->seqs_arg)
            dt = call_it(L, n, ctx, ptok, attn / (double)ptok - (double)ptok * 0.5 / m, R->sn, 1);
        else
            dt = call_it(L, n, ctx, ptok, attn / (double)ptok - (double)ptok * 0.5, 0, 0);
    }
    return begin(R, t, dt, n, ptok, kv_dec + R->kv_pref);
}

static int finish_done(Rep *R, int64_t i) {
    if (grow((void **)&R->done, &R->donecap, R->donen + 1, sizeof(int64_t))) return -1;
    R->done[R->donen++] = i;
    return 0;
}

static int retire(Loop *L, Rep *R, int64_t s, double t) {
    Req *q = L->q;
    while (R->dn && R->dheap[0].step <= s) {
        DEntry e = dpop(R);
        Req *r = &q[e.idx];
        if (e.epoch != r->epoch) continue;
        r->gen = r->osl;
        r->t_done = t;
        R->n_dec -= 1;
        R->C -= r->c;
        r->start = -1;
        rl_remove(q, &R->running, e.idx);
        if (finish_done(R, e.idx)) return -1;
    }
    return 0;
}

static int finish_step(Loop *L, Rep *R, double t) {
    Req *q = L->q;
    int64_t s = R->k;
    if (R->sn) {
        for (int64_t j = 0; j < R->sn; j++) q[R->sched_idx[j]].done += R->sched_c[j];
        while (R->prefilling.len && q[R->prefilling.head].done >= q[R->prefilling.head].prompt) {
            int64_t i = R->prefilling.head;
            Req *r = &q[i];
            ql_remove(q, &R->prefilling, i);
            R->kv_pref -= r->prompt;
            r->gen += 1;
            if (r->t_first < 0) r->t_first = t;
            if (r->gen >= r->osl) {
                r->t_done = t;
                rl_remove(q, &R->running, i);
                if (finish_done(R, i)) return -1;
            } else {
                r->start = s;
                r->c = r->prompt - s;
                R->n_dec += 1;
                R->C += r->c;
                DEntry e = {s + r->osl - r->gen, r->rid, r->epoch, i};
                if (dpush(R, e)) return -1;
            }
        }
    }
    if (retire(L, R, s, t)) return -1;
    R->k = s + 1;
    return 0;
}

/* ---- the router (engine.least_request) */
static uint64_t mix64(uint64_t x) {
    x = x + 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int64_t least_request(Loop *L, uint64_t key) {
    int64_t n = L->nrep;
    if (n == 1) return 0;
    uint64_t h = mix64(key);
    int64_t i = (int64_t)(h % (uint64_t)n);
    int64_t j = (int64_t)((h >> 32) % (uint64_t)(n - 1));
    j += j >= i;
    Rep *a = &L->reps[i], *b = &L->reps[j];
    return (b->running.len + b->waiting.len < a->running.len + a->waiting.len) ? j : i;
}

static void free_loop(Loop *L) {
    if (L->reps) {
        for (int64_t i = 0; i < L->nrep; i++) {
            free(L->reps[i].dheap); free(L->reps[i].sched_idx); free(L->reps[i].sched_c);
            free(L->reps[i].done);
        }
    }
    free(L->reps); free(L->q); free(L->eheap); free(L->lin);
}

static int get_buf(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t item) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != item || !b->format || strcmp(b->format, fmt) != 0) {
        PyErr_Format(PyExc_TypeError, "expected a contiguous buffer of '%s'", fmt);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* Request's fields (its __slots__), in this order; each set by its member descriptor's offset */
static const char *SLOTS[] = {"rid", "w", "dep", "rep", "arrival", "isl", "osl", "prompt", "done", "gen",
                              "start", "c", "epoch", "t_sched", "t_first", "t_done", "preempted", "status",
                              "cached", "row", "host"};
#define NSLOTS ((int)(sizeof SLOTS / sizeof SLOTS[0]))

static int slot_offsets(PyTypeObject *type, Py_ssize_t *off) {
    for (int k = 0; k < NSLOTS; k++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)type, SLOTS[k]);
        if (!d) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type)
                 && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok) off[k] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, SLOTS[k]);
            return -1;
        }
    }
    return 0;
}

/* A Request with every field of ``r`` (as ``trimtab.sim.replica.unpack_request`` makes one: no __init__) */
static PyObject *make_request(PyTypeObject *type, const Py_ssize_t *off, const Req *r) {
    PyObject *o = type->tp_alloc(type, 0);
    if (!o) return NULL;
    PyObject *v[NSLOTS] = {
        PyLong_FromLongLong(r->rid), PyLong_FromLongLong(r->w), PyLong_FromLongLong(r->dep),
        PyLong_FromLongLong(r->rep), PyFloat_FromDouble(r->arrival), PyLong_FromLongLong(r->isl),
        PyLong_FromLongLong(r->osl), PyLong_FromLongLong(r->prompt), PyLong_FromLongLong(r->done),
        PyLong_FromLongLong(r->gen), PyLong_FromLongLong(r->start), PyLong_FromLongLong(r->c),
        PyLong_FromLongLong(r->epoch), PyFloat_FromDouble(r->t_sched), PyFloat_FromDouble(r->t_first),
        PyFloat_FromDouble(r->t_done), PyLong_FromLongLong(r->preempted), PyLong_FromLongLong(r->status),
        PyLong_FromLong(0), PyLong_FromLong(-1), PyLong_FromLong(0)};
    int bad = 0;
    for (int k = 0; k < NSLOTS; k++) {
        if (!v[k]) { bad = 1; continue; }
        /* (a fresh object's slots are NULL: nothing to release) */
        *(PyObject **)((char *)o + off[k]) = v[k];
    }
    if (bad) { Py_DECREF(o); return NULL; }
    return o;
}

static PyObject *build_result(Loop *L, int64_t n, double t_last, int stopped, PyTypeObject *type) {
    /* ([the requests, in arrival order], [replica counters..., the requests done in order], t_last,
       stopped at the drain limit) */
    Py_ssize_t off[NSLOTS];
    if (slot_offsets(type, off)) return NULL;
    PyObject *rows = PyList_New(n);
    if (!rows) return NULL;
    for (int64_t j = 0; j < n; j++) {
        PyObject *o = make_request(type, off, &L->q[j]);
        if (!o) { Py_DECREF(rows); return NULL; }
        PyList_SET_ITEM(rows, j, o);
    }
    PyObject *reps = PyList_New(L->nrep);
    if (!reps) { Py_DECREF(rows); return NULL; }
    for (int64_t i = 0; i < L->nrep; i++) {
        Rep *R = &L->reps[i];
        PyObject *done = PyList_New(R->donen);
        if (!done) { Py_DECREF(rows); Py_DECREF(reps); return NULL; }
        for (int64_t j = 0; j < R->donen; j++) {
            PyObject *o = PyList_GET_ITEM(rows, R->done[j]);
            Py_INCREF(o);
            PyList_SET_ITEM(done, j, o);
        }
        PyObject *rec = Py_BuildValue(
            "(LOLLLLLdddddLLLN)", (long long)R->k, R->busy ? Py_True : Py_False, (long long)R->n_dec,
            (long long)R->C, (long long)R->kv_pref, (long long)R->Csh, (long long)R->p_step, R->t0, R->busy_s,
            R->prefill_s, R->kv_area, R->batch_area,
            (long long)R->kv_max, (long long)R->preemptions, (long long)R->steps, done);
        if (!rec) { Py_DECREF(rows); Py_DECREF(reps); return NULL; }
        PyList_SET_ITEM(reps, i, rec);
    }
    return Py_BuildValue("(NNdO)", rows, reps, t_last, stopped ? Py_True : Py_False);
}

static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *ts_o, *ws_o, *isl_o, *osl_o, *dep_o, *order_o, *it, *line;
    PyTypeObject *req_type;
    long long nrep, mns, mbt;
    double cap, admit_cap, cap_turn, t_stop;
    int ahead, seqs_arg;
    unsigned long long base;
    if (!PyArg_ParseTuple(args, "OOOOOOLdddLLppOOKdO!", &ts_o, &ws_o, &isl_o, &osl_o, &dep_o, &order_o,
                          &nrep, &cap, &admit_cap, &cap_turn, &mns, &mbt, &ahead, &seqs_arg, &it, &line,
                          &base, &t_stop, &PyType_Type, &req_type))
        return NULL;
    if (nrep < 1) { PyErr_SetString(PyExc_ValueError, "no replicas"); return NULL; }
    /* the arrivals' columns (times; workloads, lengths, deployments) and this run's arrival indices */
    PyObject *objs[6] = {ts_o, ws_o, isl_o, osl_o, dep_o, order_o};
    Py_buffer bufs[6];
    for (int b = 0; b < 6; b++) {
        if (get_buf(objs[b], &bufs[b], b ? "q" : "d", 8)) {
            while (b--) PyBuffer_Release(&bufs[b]);
            return NULL;
        }
    }
    const double *T = bufs[0].buf;
    const int64_t *W = bufs[1].buf, *I = bufs[2].buf, *O = bufs[3].buf, *D = bufs[4].buf, *ORD = bufs[5].buf;
    int64_t n = bufs[5].len / 8, total = bufs[0].len / 8;
    PyObject *out = NULL;
    Loop L;
    memset(&L, 0, sizeof L);
    L.nrep = nrep; L.cap = cap; L.admit_cap = admit_cap; L.mns = mns; L.mbt = mbt;
    L.ahead = ahead; L.seqs_arg = seqs_arg; L.it = it; L.line = line;
    L.q = calloc((size_t)(n ? n : 1), sizeof(Req));
    L.reps = calloc((size_t)nrep, sizeof(Rep));
    if (!L.q || !L.reps) { PyErr_NoMemory(); goto done; }
    for (int64_t i = 0; i < nrep; i++) {
        Rep *R = &L.reps[i];
        R->waiting.head = R->waiting.tail = -1;
        R->prefilling.head = R->prefilling.tail = -1;
        R->running.head = R->running.tail = -1;
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t i = ORD[j];
        if (i < 0 || i >= total || (j && ORD[j - 1] >= i)) {
            PyErr_SetString(PyExc_ValueError, "arrival indices must be ascending and in range");
            goto done;
        }
    }
    int64_t j = 0;
    int stopped = 0;
    double t = 0.0;
    double t_arr = n ? T[ORD[0]] : INFINITY;
    for (;;) {
        if (L.en && L.eheap[0].t <= t_arr) {
            EEntry e = epop(&L);
            t = e.t;
            if (t > t_stop) { stopped = 1; break; }  /* (every arrival came before the drain limit) */
            Rep *R = &L.reps[e.rep];
            if (finish_step(&L, R, t)) goto done;
            double tn = start_step(&L, R, t);
            if (L.error) goto done;
            if (tn >= 0 && epush(&L, tn, e.rep)) goto done;
            continue;
        }
        if (j >= n) break;
        t = t_arr;
        /* the arrival (_on_arrival, _admit) */
        int64_t i = ORD[j];
        Req *r = &L.q[j];
        r->rid = i; r->w = W[i]; r->dep = D[i]; r->arrival = t; r->isl = I[i]; r->osl = O[i];
        r->rep = -1; r->prompt = I[i]; r->start = -1;
        r->t_sched = r->t_first = r->t_done = -1.0;
        r->qprev = r->qnext = r->rprev = r->rnext = -1;
        if ((double)(r->isl + r->osl) > cap_turn) {
            r->status = 1;
        } else {
            int64_t ri = least_request(&L, (uint64_t)base + (uint64_t)i);
            Rep *R = &L.reps[ri];
            r->rep = ri;
            ql_append(L.q, &R->waiting, j);
            if (!R->busy) {
                double tn = start_step(&L, R, t);
                if (L.error) goto done;
                if (tn >= 0 && epush(&L, tn, ri)) goto done;
            }
        }
        j++;
        t_arr = j < n ? T[ORD[j]] : INFINITY;
    }
    out = build_result(&L, n, t, stopped, req_type);
done:
    free_loop(&L);
    for (int b = 0; b < 6; b++) PyBuffer_Release(&bufs[b]);
    return out;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(t, w, isl, osl, dep, order, replicas, cap, admit_cap, cap_turn, max_num_seqs, max_batched_tokens, "
     "async_scheduling, seqs_arg, iteration_s, line, route_base, t_stop, Request): one deployment's "
     "event loop (trimtab.sim.fast)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loop", NULL, -1, methods};

PyMODINIT_FUNC PyInit__loop(void) { return PyModule_Create(&module); }
