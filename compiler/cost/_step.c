/* One engine step's time, compiled: ``trimtab.cost.step.ReplicaStep._step_py`` (the reference, with the
equations in ``iteration_s``'s docstring) transcribed term for term.

Why: the planner asks for a step time about three million times on a 100-workload spec (every capacity
search's fixed point, every simulated step with prompt tokens), and the interpreted function costs about
2.5 microseconds a call, a quarter of a plan's CPU. A ``Step`` holds the two folded term tuples of one replica
(``_step``, ``_step_graph``) and the eager all-reduce; calling it gives the reference's float to the last bit:
the same operations in the same order (left to right, as Python groups them), each rounded as Python rounds
it (built with -ffp-contract=off: no fused multiply-add), the MoE block's three terms included
(``MoeLayer.compute_s``, ``router_s``, ``comm_s`` over the constants of its ``kernel_terms``).
tests/cost/test_step_kernel.py compares the two on every bundled model, layout and argument range. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

/* the folded terms of ``ReplicaStep._fold``, in its tuple's order */
enum { A_W, A_ACT, A_FL, M_W, M_ACT, M_FL, KV_S, ATT_FL, ELEM, AR0, AR1, H_W, H_ACT, H_FL, HOP1, K2, KS, A_K,
       PLS, FIXED, KV_R, ATT_FL_P, PP, DP, NUM };

typedef struct {
    double v[NUM];
    int moe, comm;   /* the MoE block's terms (the fold's methods not None): compute and router; comm */
} Fold;

/* ``MoeLayer.kernel_terms``, in its order */
enum { E_, K_, PE, WB, G_, EP, BW, SHARE, ACT_PER, RATE, K4, SHAPE, ROWS_E,
       T_ON, MISS,
       B_ON, B_K, B_Q, B_ONE_Q, B_SPARE, B_E1, B_EMAX, B_CAP,
       R_W, R_HE, R_BW, R_FLOPS, R_SHARE, R_KS,
       C_MODE, C_G, C_H, C_K, C_EP, C_SHARE, C_LAT, C_LAT2, C_BUS, C_G1, C_EP1, C_LINK,
       S_GROUP, S_PEERS, S_FAR, S_NIC, MOE_NUM };

#define ACT_BYTES 2.0   /* trimtab.cost.moe.ACT_BYTES */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Fold eager, graph;
    int has_ar; double ar_a, ar_b;   /* the eager all-reduce (fixed, per token) where tp > 1 */
    double limit;                    /* graph_tokens x pp: steps of at most this many tokens replay a graph */
    double m[MOE_NUM];               /* the MoE block's constants, where the replica has one */
    PyObject *args;                  /* the constructor's arguments, for pickling */
} Step;

static int read_fold(PyObject *t, Fold *f) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != NUM + 3) {
        PyErr_SetString(PyExc_TypeError, "Step: a fold is a tuple of 27 terms");
        return -1;
    }
    for (int i = 0; i < NUM; i++) {
        f->v[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(t, i));
        if (f->v[i] == -1.0 && PyErr_Occurred()) return -1;
    }
    f->moe = PyTuple_GET_ITEM(t, NUM) != Py_None;
    f->comm = PyTuple_GET_ITEM(t, NUM + 2) != Py_None;
    return 0;
}

/* MoeLayer.compute_s, with _touched_share's and _busiest_rank's closures */
static double moe_compute(const double *m, double tokens) {
    double imb = 1.0, hit = 1.0;
    if (m[B_ON] != 0.0 && !(tokens <= 0)) {
        double mean = tokens * m[B_K] * m[B_Q];
        double f = 1.0 + sqrt(mean * m[B_ONE_Q] * m[B_SPARE] / m[B_E1]) * m[B_EMAX] / mean;
        imb = m[B_CAP] < f ? m[B_CAP] : f;
    }
    if (m[T_ON] != 0.0) hit = 1.0 - pow(m[MISS], 0.0 > tokens ? 0.0 : tokens);
    double w = m[E_] * hit * m[PE] * m[WB] / m[G_];
    double act = imb * tokens * m[K_] / m[EP] * m[ACT_PER] * ACT_BYTES;
    double fl = imb * 2 * tokens * m[K_] * m[PE] / m[G_];
    if (m[ROWS_E] != 0.0 || m[SHAPE] != 1.0) fl = (fl + m[ROWS_E] * hit) * m[SHAPE];
    double x = (w + act) / m[BW], y = fl / m[RATE];
    return m[SHARE] * ((y > x ? y : x) + m[K4]);
}

/* MoeLayer.router_s */
static double moe_router(const double *m, double rank_tokens) {
    double x = (m[R_W] + rank_tokens * m[R_HE]) * ACT_BYTES / m[R_BW];
    double y = 2 * rank_tokens * m[R_W] / m[R_FLOPS];
    return m[R_SHARE] * ((y > x ? y : x) + m[R_KS]);
}

/* MoeLayer.comm_s, with _spread_s */
static double moe_comm(const double *m, double tokens) {
    if (m[C_MODE] == 0.0) return 0.0;
    if (m[C_MODE] == 1.0)
        return m[C_SHARE] * (m[C_LAT2] + tokens * m[C_H] * ACT_BYTES * 2 * m[C_G1] / m[C_G] / m[C_BUS]);
    double sent = tokens / m[C_G] * m[C_K] * m[C_H] * ACT_BYTES * m[C_EP1] / m[C_EP];
    double spread = 0.0;
    if (!(m[S_GROUP] <= 1)) {
        double off = sent * m[S_FAR] / m[S_PEERS];
        double x = (sent - off) / m[C_LINK], y = off != 0.0 ? off / m[S_NIC] : 0.0;
        spread = y > x ? y : x;
    }
    return m[C_SHARE] * 2 * (m[C_LAT] + spread);
}

/* ``_step_py``: the same statements, in its order */
static double step_time(const Step *s, double decode_batch, double decode_ctx, double prefill_tokens,
                        double prefill_ctx, double prefill_seqs, double remote_share) {
    int graph = decode_batch + prefill_tokens <= s->limit;
    const Fold *f = graph ? &s->graph : &s->eager;
    const double *v = f->v;
    double pp = v[PP], dp = v[DP];
    double b = decode_batch / pp;
    double p = prefill_tokens / pp;
    double seqs = p > 0 ? (prefill_seqs > 1.0 ? prefill_seqs : 1.0) / pp : 0.0;
    double T = b + p;
    if (dp > 1) {
        double spread = p > 0 ? (1.0 > seqs ? 1.0 : seqs) : 1.0;
        spread = spread < dp ? spread : dp;
        b = b / dp; p = p / spread; seqs = seqs / spread;
    }
    double Ta = b + p;
    double x = v[A_W] + Ta * v[A_ACT], y = Ta * v[A_FL];
    double t_attn_proj = (x >= y ? x : y) + v[A_K];
    x = v[M_W] + Ta * v[M_ACT]; y = Ta * v[M_FL];
    double t_mlp = (x >= y ? x : y) + v[K2];
    if (f->moe) {
        if (!f->comm)
            t_mlp += moe_compute(s->m, T) + moe_router(s->m, Ta);
        else
            t_mlp += moe_compute(s->m, T) + moe_router(s->m, Ta) + moe_comm(s->m, T);
    }
    double ar = v[AR0] + Ta * v[AR1];
    if (graph && s->has_ar) {
        x = s->ar_a + Ta * s->ar_b;
        ar = x < ar ? x : ar;
    }
    double layer = t_attn_proj + t_mlp + Ta * v[ELEM] + ar;
    if (remote_share != 0.0 && v[KV_R] != 0.0) {
        double r = remote_share;
        if (b > 0) {
            double bc = b * decode_ctx;
            double u = (1 - r) * bc * v[KV_S], w = bc * v[ATT_FL];
            layer += (w > u ? w : u) + r * bc * v[KV_R];   /* max(u, w): the first where equal */
        }
        if (p > 0)
            layer += p * (prefill_ctx + p / seqs / 2) * v[ATT_FL_P]
                     + seqs * prefill_ctx * ((1 - r) * v[KV_S] + r * v[KV_R]) + r * p * v[KV_R];
    } else {
        if (b > 0) {
            double bc = b * decode_ctx;
            x = bc * v[KV_S]; y = bc * v[ATT_FL];
            layer += x >= y ? x : y;
        }
        if (p > 0)
            layer += p * (prefill_ctx + p / seqs / 2) * v[ATT_FL_P] + seqs * prefill_ctx * v[KV_S];
    }
    double head_tokens = b + seqs;
    x = v[H_W] + head_tokens * v[H_ACT]; y = head_tokens * v[H_FL];
    double stage_head = (x >= y ? x : y) + v[KS];
    return v[PLS] * layer + stage_head + Ta * v[HOP1] + v[FIXED];
}

static const char *const NAMES[6] = {"decode_batch", "decode_ctx", "prefill_tokens", "prefill_ctx",
                                     "prefill_seqs", "remote_share"};

static PyObject *step_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    double a[6] = {0.0, 0.0, 0.0, 0.0, 1.0, 0.0};
    int seen[6] = {0};
    if (n > 6 || n + nk < 2) {
        PyErr_SetString(PyExc_TypeError, "iteration_s takes 2 to 6 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n + nk; i++) {
        int k = (int)i;
        if (i >= n) {
            const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i - n));
            if (name == NULL) return NULL;
            for (k = 0; k < 6 && strcmp(name, NAMES[k]) != 0; k++) {}
            if (k == 6 || seen[k]) {
                PyErr_Format(PyExc_TypeError, "iteration_s: unexpected or repeated argument %s", name);
                return NULL;
            }
        }
        seen[k] = 1;
        a[k] = PyFloat_AsDouble(args[i]);
        if (a[k] == -1.0 && PyErr_Occurred()) return NULL;
    }
    if (!seen[0] || !seen[1]) {
        PyErr_SetString(PyExc_TypeError, "iteration_s needs decode_batch and decode_ctx");
        return NULL;
    }
    return PyFloat_FromDouble(step_time((Step *)self, a[0], a[1], a[2], a[3], a[4], a[5]));
}

/* ``ReplicaModel._fixed_point`` without a KV tier: the decode batch's fixed point b = D x TPOT(b) with
``_Aitken``'s acceleration, the same iterates in the same order (its step and retreat transcribed here). */
typedef struct { double last[3]; int n; double safe, cap; int on, used; } Aitken;

static int aitken_step(Aitken *a, double b, double b_new, double *out) {
    if (b_new >= b && b_new > a->safe) a->safe = b_new;
    if (!a->on) return 0;
    a->last[a->n++] = b_new;
    if (a->n < 3) return 0;
    double b0 = a->last[0], b1 = a->last[1], b2 = a->last[2];
    a->last[0] = b2; a->n = 1;
    double den = b2 - 2 * b1 + b0;
    if (den == 0 || !((b1 - b0) * (b2 - b1) > 0)) return 0;
    double acc = b0 - pow(fabs(b1 - b0), 2.0) / den;   /* Python's (b1 - b0) ** 2: pow of the magnitude */
    if (!(isfinite(acc) && 0.0 <= acc && acc <= a->cap)) return 0;
    a->used = 1;
    a->last[0] = acc; a->n = 1;
    *out = acc;
    return 1;
}

static int aitken_retreat(Aitken *a) {
    if (!(a->on && a->used)) return 0;
    a->on = 0;
    return 1;
}

/* One class's prompts at decode batch b with ``chunk`` tokens a step left for them: ``load`` in
``ReplicaModel.evaluate`` (no KV tier): the prefill seconds and steps of one prompt, and the class's share of
the utilisation rho and of the prefill-carrying steps a second. -1 where Python divides by zero. */
typedef struct { double new, cached, host, rate; } Offered;

static int load(const Step *st, const Offered *c, Py_ssize_t n, double b, double chunk, double ctx,
                double *rho, double *steps_total, double *sv, double *nsteps) {
    *rho = 0.0; *steps_total = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double per_step = chunk < c[i].new ? chunk : c[i].new;
        if (per_step == 0) {
            PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
            return -1;
        }
        double steps = c[i].new / per_step;
        double t = step_time(st, b, ctx, per_step, c[i].cached + (c[i].new - per_step) / 2, 1.0, 0.0);
        double t_c = steps * t + c[i].host;
        sv[i] = t_c; nsteps[i] = steps;
        *rho += c[i].rate * t_c;
        *steps_total += c[i].rate * steps;
    }
    return 0;
}

typedef struct { int status; double b, b_in, t_d, rho, steps_total, tpot, b_new; } Point;

/* The loop of ``evaluate``; status 0 converged; 1 no room for prompts; 2 prefill saturated; 3 batch limit;
4 no steady state; -1 an exception set. */
static Point fixed_point(const Step *st, double K, double mns, double D, double ctx, double b, int on,
                         double cap, int max_iter, const Offered *c, Py_ssize_t n, double *sv,
                         double *nsteps) {
    Aitken a = {{b, 0, 0}, 1, b, cap, on, 0};
    Point p = {4, b, 0, 0, 0, 0, 0, 0};
    for (int it = 0; it < max_iter; it++) {
        double chunk = K - b;
        if (chunk < 1) {
            if (aitken_retreat(&a)) { b = a.safe; continue; }
            p.status = 1;
            break;
        }
        p.t_d = step_time(st, b, ctx, 0.0, 0.0, 1.0, 0.0);
        if (load(st, c, n, b, chunk, ctx, &p.rho, &p.steps_total, sv, nsteps)) { p.status = -1; break; }
        if (p.rho >= 1 && aitken_retreat(&a)) { b = a.safe; continue; }
        if (p.rho >= 1) { p.status = 2; break; }
        p.tpot = 1.0 / (p.steps_total + (1 - p.rho) / p.t_d);
        p.b_new = D * p.tpot;
        if (p.b_new > mns && aitken_retreat(&a)) { b = a.safe; continue; }
        if (p.b_new > mns) { p.status = 3; break; }
        if (fabs(p.b_new - b) <= 1e-4 * (1.0 > p.b_new ? 1.0 : p.b_new)) {
            p.b_in = b; b = p.b_new; p.status = 0;
            break;
        }
        double acc;
        b = aitken_step(&a, b, p.b_new, &acc) ? acc : p.b_new;
    }
    p.b = b;
    return p;
}

static int read_offered(PyObject *classes, Offered *c) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); i++)
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(classes, i), "dddd", &c[i].new, &c[i].cached, &c[i].host,
                              &c[i].rate))
            return -1;
    return 0;
}

static PyObject *step_fixed_point(PyObject *self, PyObject *args) {
    double K, mns, D, ctx, b, cap;
    int on, max_iter;
    PyObject *classes;
    if (!PyArg_ParseTuple(args, "dddddpdiO!:fixed_point", &K, &mns, &D, &ctx, &b, &on, &cap, &max_iter,
                          &PyTuple_Type, &classes))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(classes);
    Offered *c = PyMem_Malloc(sizeof(Offered) * n + sizeof(double) * 2 * n + 1);
    if (c == NULL) return PyErr_NoMemory();
    double *sv = (double *)(c + n), *nsteps = sv + n;
    PyObject *res = NULL;
    if (read_offered(classes, c) == 0) {
        Point p = fixed_point((const Step *)self, K, mns, D, ctx, b, on, cap, max_iter, c, n, sv, nsteps);
        PyObject *s_out = PyTuple_New(n), *k_out = PyTuple_New(n);
        if (p.status >= 0 && s_out != NULL && k_out != NULL) {
            for (Py_ssize_t i = 0; i < n; i++) {
                PyTuple_SET_ITEM(s_out, i, PyFloat_FromDouble(sv[i]));
                PyTuple_SET_ITEM(k_out, i, PyFloat_FromDouble(nsteps[i]));
            }
            res = Py_BuildValue("(idddddddOO)", p.status, p.b, p.b_in, p.t_d, p.rho, p.steps_total, p.tpot,
                                p.b_new, s_out, k_out);
        }
        Py_XDECREF(s_out);
        Py_XDECREF(k_out);
    }
    PyMem_Free(c);
    return res;
}

/* scipy.special's gammaincc (Cephes), the same C function ``trimtab.cost.queueing.gamma_q`` calls through
``scipy.special.cython_special``: given once (``use_gammaincc``) from that module's C API capsule. */
static double (*gammaincc)(double, double, int) = NULL;

static PyObject *use_gammaincc(PyObject *Py_UNUSED(m), PyObject *capsule) {
    void *f = PyCapsule_GetPointer(capsule, "double (double, double, int __pyx_skip_dispatch)");
    if (f == NULL) return NULL;
    gammaincc = (double (*)(double, double, int))f;
    Py_RETURN_NONE;
}

/* ``ReplicaModel.prefill_s`` without a KV tier */
static double prefill_s(const Step *st, double K, double isl, double b, double ctx, double cached) {
    double chunk = K - b;
    if (chunk <= 0) return Py_HUGE_VAL;
    double new = isl - cached;
    double n = ceil(new / chunk);
    n = 1 > n ? 1 : n;
    double last = new - (n - 1) * chunk, t = 0.0;
    for (double i = 0; i < n - 1; i++) t += step_time(st, b, ctx, chunk, cached + i * chunk, 1.0, 0.0);
    return t + step_time(st, b, ctx, last, cached + (n - 1) * chunk, 1.0, 0.0);
}

/* ``trimtab.cost.queueing.tpot_tail``'s parts: (weight, sd, gamma shape a or a normal, sqrt(a)) */
typedef struct { double w, sd, a, sqrt_a; int normal; } Part;

/* its ``miss``: the share of requests whose TPOT exceeds t */
static double miss(const Part *parts, int np, double t, double tpot, double wsum) {
    double total = 0.0;
    for (int i = 0; i < np; i++) {
        double x = (t - tpot) / parts[i].sd, tail;
        if (parts[i].normal) {
            tail = 1 - 0.5 * (1.0 + erf((x - 0.0) / (1.0 * sqrt(2.0))));   /* 1 - NormalDist().cdf(x) */
        } else {
            double v = parts[i].a + x * parts[i].sqrt_a;
            v = 0.0 > v ? 0.0 : v;
            tail = v <= 0 ? 1.0 : gammaincc(parts[i].a, v, 0);
        }
        total += parts[i].w * tail;
    }
    return total / wsum;
}

/* ``tpot_tail`` for one class, decided against ``bound`` (``_tail_decision``, else ``bisect_width``) */
static double tpot_tail(double rate, double cv2, const double *osl, const double *share, int npts, double s0,
                        double k0, double t_d, double tpot, double percentile, double bound) {
    double lam = rate;
    if (lam <= 0 || percentile <= 50) return tpot;
    double d0 = s0 - k0 * t_d;
    d0 = 0.0 > d0 ? 0.0 : d0;
    double ed2 = (0.0 + rate * pow(d0, 2.0) * (1 + cv2)) / lam;
    double ed3 = (0.0 + rate * pow(d0, 3.0) * pow(1 + cv2, 3.0)) / lam;
    double ed2_15 = ed2 > 0 ? pow(ed2, 1.5) : 0.0;
    Part parts[64];
    int np = 0;
    for (int j = 0; j < npts; j++) {
        double k = osl[j] - 1;
        if (k >= 1 && ed2 > 0) {
            double m = lam * k * tpot, g = ed3 / (sqrt(m) * ed2_15);
            Part q = {rate * share[j], sqrt(m * ed2) / k, 0.0, 0.0, g <= 1e-6};
            if (!q.normal) { q.a = 4.0 / (g * g); q.sqrt_a = sqrt(4.0 / (g * g)); }
            parts[np++] = q;
        }
    }
    if (np == 0) return tpot;
    double wsum = lam, q = 1 - percentile / 100.0, top = parts[0].sd;
    for (int i = 1; i < np; i++) if (parts[i].sd > top) top = parts[i].sd;
    double lo = tpot, hi = tpot + 20 * top, width = 1e-4 * tpot;
    if (bound < lo) return Py_HUGE_VAL;
    if (bound >= hi) return tpot;
    if (miss(parts, np, bound, tpot, wsum) > q) return Py_HUGE_VAL;
    if (bound - width >= lo && miss(parts, np, bound - width, tpot, wsum) <= q) return tpot;
    while (!(hi - lo <= width)) {
        double mid = (lo + hi) / 2;
        if (miss(parts, np, mid, tpot, wsum) > q) lo = mid; else hi = mid;
    }
    return hi;
}

/* tpot_tail(rate, isl_cv2, osl_points, s, steps, t_d, tpot, percentile, bound): the decided TPOT tail of one
class, as ``decide`` takes it (for the tests against ``trimtab.cost.queueing.tpot_tail``) */
static PyObject *tail_of_one(PyObject *Py_UNUSED(m), PyObject *args) {
    double rate, cv2, s0, k0, t_d, tpot, percentile, bound, o[64], w[64];
    PyObject *points;
    if (!PyArg_ParseTuple(args, "ddO!dddddd:tpot_tail", &rate, &cv2, &PyTuple_Type, &points, &s0, &k0, &t_d,
                          &tpot, &percentile, &bound))
        return NULL;
    int n = (int)PyTuple_GET_SIZE(points);
    if (n < 1 || n > 64 || gammaincc == NULL) {
        PyErr_SetString(PyExc_ValueError, "tpot_tail: 1 to 64 points, after use_gammaincc");
        return NULL;
    }
    for (int j = 0; j < n; j++)
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(points, j), "dd", o + j, w + j)) return NULL;
    return PyFloat_FromDouble(tpot_tail(rate, cv2, o, w, n, s0, k0, t_d, tpot, percentile, bound));
}

/* ``ReplicaModel.meets_at`` for one class on a replica without a KV tier: ``evaluate`` in decision mode from
its fixed point on, then ``meets``: (whether the class at its rate meets both SLOs, the decode batch). */
static PyObject *step_decide(PyObject *self, PyObject *args) {
    const Step *st = (const Step *)self;
    double K, mns, D, ctx, b, cap, kv_cap, overhead, percentile, z, ttft_ms, tpot_ms;
    double isl, osl, cv2, cached, tail, tail_cached, reload_tail;
    int on, max_iter, async_, prefix;
    Offered c;
    PyObject *points;
    if (!PyArg_ParseTuple(args, "dddddpdi(dddd)dddddpdpdddddddO!:decide", &K, &mns, &D, &ctx, &b, &on,
                          &cap, &max_iter, &c.new, &c.cached, &c.host, &c.rate, &kv_cap, &overhead,
                          &percentile, &z, &ttft_ms, &async_, &tpot_ms, &prefix, &isl, &osl, &cv2, &cached,
                          &tail, &tail_cached, &reload_tail, &PyTuple_Type, &points))
        return NULL;
    if (gammaincc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "decide: use_gammaincc first");
        return NULL;
    }
    double sv, nsteps, pts_o[64], pts_w[64];
    int npts = (int)PyTuple_GET_SIZE(points);
    if (npts > 64) {
        PyErr_SetString(PyExc_ValueError, "decide: at most 64 output-length points");
        return NULL;
    }
    for (int j = 0; j < npts; j++)
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(points, j), "dd", pts_o + j, pts_w + j)) return NULL;
    if (npts == 0) { pts_o[0] = osl; pts_w[0] = 1.0; npts = 1; }
    Point p = fixed_point(st, K, mns, D, ctx, b, on, cap, max_iter, &c, 1, &sv, &nsteps);
    if (p.status < 0) return NULL;
    b = p.b;
    if (p.status) return Py_BuildValue("(Od)", Py_False, b);
    double rho = p.rho, lam = c.rate;
    /* _prefill_queue */
    double es = 0.0 + c.rate * sv, es2 = 0.0 + c.rate * sv * sv * (1 + cv2), pre = 0.0 + c.rate * isl;
    es /= lam; es2 /= lam;
    double theta = es2 / (2 * es * (1 - rho)), q = 1 - percentile / 100.0;
    double wait_p = rho > q ? theta * log(rho / q) : 0.0;
    double ps = 1e-12 > p.steps_total ? 1e-12 : p.steps_total;
    double kv_used = b * ctx + rho * pre / ps;
    if (prefix)
        kv_used -= b * (0.0 + c.rate * osl * cached) / (1e-12 > D ? 1e-12 : D)
                   + rho * (0.0 + c.rate * cached) / ps;
    if (kv_used > kv_cap) return Py_BuildValue("(Od)", Py_False, b);
    double fe = async_ ? overhead + 1.5 * p.tpot : overhead;
    double ttft = fe + wait_p + prefill_s(st, K, tail, b, ctx, tail_cached) + reload_tail;
    int ttft_ok = ttft * 1e3 <= ttft_ms;
    if (percentile > 50 && b > 0 && ttft_ok) {
        /* the batch map's slope (map_slope), the seats and the KV at the percentile (over_caps) */
        double b2 = b + 0.01 * (b > 1.0 ? b : 1.0), slope = 1.0;
        if (!(K - b2 < 1)) {
            double rho2, steps2, s2, k2;
            if (load(st, &c, 1, b2, K - b2, ctx, &rho2, &steps2, &s2, &k2)) return NULL;
            if (rho2 < 1) {
                double f2 = D / (steps2 + (1 - rho2) / step_time(st, b2, ctx, 0.0, 0.0, 1.0, 0.0));
                slope = (f2 - b) / (b2 - p.b_in);
            }
        }
        double w = c.rate * osl;
        double num = 0.0 + w * (isl * isl * (1 + cv2) + isl * osl + osl * osl / 3), den = 0.0 + w;
        double x_sq = den > 0 ? num / den : 0.0, sl = slope > 0.0 ? slope : 0.0;
        double var = sl < 1.0 ? b / (1.0 - sl) : Py_HUGE_VAL;
        if (!isfinite(var)) return Py_BuildValue("(Od)", Py_False, b);
        if (b + z * sqrt(var) > mns) return Py_BuildValue("(Od)", Py_False, b);
        if (kv_used + z * sqrt(b * x_sq + (var - b) * ctx * ctx) > kv_cap)
            return Py_BuildValue("(Od)", Py_False, b);
    }
    double tpot_p = ttft_ok ? tpot_tail(c.rate, cv2, pts_o, pts_w, npts, sv, nsteps, p.t_d, p.tpot,
                                        percentile, tpot_ms * 1e-3)
                            : p.tpot;
    int met = ttft * 1e3 <= ttft_ms && tpot_p * 1e3 <= tpot_ms;
    return Py_BuildValue("(Od)", met ? Py_True : Py_False, b);
}

static PyObject *step_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *eager, *graph, *ar, *moe;
    double limit;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Step takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOdO:Step", &eager, &graph, &ar, &limit, &moe)) return NULL;
    Step *s = (Step *)type->tp_alloc(type, 0);
    if (s == NULL) return NULL;
    s->vectorcall = step_vectorcall;
    s->limit = limit;
    Py_INCREF(args);
    s->args = args;
    if (read_fold(eager, &s->eager) || read_fold(graph, &s->graph)) goto fail;
    if (s->eager.moe || s->graph.moe) {
        if (!PyTuple_Check(moe) || PyTuple_GET_SIZE(moe) != MOE_NUM) {
            PyErr_SetString(PyExc_TypeError, "Step: an MoE replica needs its 45 kernel_terms");
            goto fail;
        }
        for (int i = 0; i < MOE_NUM; i++) {
            s->m[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(moe, i));
            if (s->m[i] == -1.0 && PyErr_Occurred()) goto fail;
        }
    }
    if (ar != Py_None) {
        if (!PyArg_ParseTuple(ar, "dd:Step's all-reduce", &s->ar_a, &s->ar_b)) goto fail;
        s->has_ar = 1;
    }
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static void step_dealloc(Step *s) {
    Py_XDECREF(s->args);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *step_reduce(Step *s, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(OO)", Py_TYPE(s), s->args);
}

static PyMethodDef step_methods[] = {
    {"__reduce__", (PyCFunction)step_reduce, METH_NOARGS, NULL},
    {"decide", step_decide, METH_VARARGS,
     "decide(...): ReplicaModel.meets_at for one class without a KV tier: (met, decode batch)"},
    {"fixed_point", step_fixed_point, METH_VARARGS,
     "fixed_point(K, max_num_seqs, D, ctx_dec, b, accelerate, cap, max_iter, classes): "
     "ReplicaModel._fixed_point without a KV tier (classes: (new, cached, reload_s, rate) each)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject StepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trimtab.cost._step.Step",
    .tp_basicsize = sizeof(Step),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Step(fold, fold_graph, allreduce_eager, graph_limit, moe_terms): a replica's iteration_s, "
              "compiled "
              "(trimtab.cost.step).",
    .tp_new = step_new,
    .tp_dealloc = (destructor)step_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Step, vectorcall),
    .tp_methods = step_methods,
};

static PyMethodDef module_methods[] = {
    {"tpot_tail", tail_of_one, METH_VARARGS, "tpot_tail(...): the decided TPOT tail of one class"},
    {"use_gammaincc", use_gammaincc, METH_O,
     "use_gammaincc(capsule): scipy.special.cython_special's gammaincc, for Step.decide"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_step", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__step(void) {
    if (PyType_Ready(&StepType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&StepType);
    if (PyModule_AddObject(m, "Step", (PyObject *)&StepType) < 0) {
        Py_DECREF(&StepType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
