/* The queueing side of ``trimtab.cost._step``: the prefill of the tail request (``ReplicaModel.prefill_s``),
the TPOT tail (``trimtab.cost.queueing.tpot_tail``), the capacity search's decision (``Step.decide``:
``evaluate`` in decision mode from its fixed point on, then ``meets``), the search itself (``Step.capacity``)
and the P/D roles' searches (``Step.role_capacity``), transcribed operation for operation as
compiler/cost/_step.c is (see there; tests/cost/test_step_kernel.py). */
#include "_step.h"

/* scipy.special's gammaincc (Cephes), the same C function ``trimtab.cost.queueing.gamma_q`` calls through
``scipy.special.cython_special``: given once (``use_gammaincc``) from that module's C API capsule. */
static double (*gammaincc)(double, double, int) = NULL;

PyObject *use_gammaincc(PyObject *Py_UNUSED(m), PyObject *capsule) {
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

/* (a, b) from any sequence of two numbers: an output length and its share */
static int read_pair(PyObject *item, double *a, double *b) {
    PyObject *f = PySequence_Fast(item, "an output-length point is a pair");
    if (f == NULL) return 0;
    int ok = PySequence_Fast_GET_SIZE(f) == 2;
    if (ok) {
        *a = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(f, 0));
        *b = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(f, 1));
        ok = !PyErr_Occurred();
    } else {
        PyErr_SetString(PyExc_TypeError, "an output-length point is a pair");
    }
    Py_DECREF(f);
    return ok;
}

/* One class of ``tpot_tail``: its rate, input-length cv^2, prefill seconds and steps of one prompt, and its
output lengths with their shares */
typedef struct { double rate, cv2, s, k; const double *o, *w; int npts; } TailClass;

/* ``trimtab.cost.queueing.tpot_tail``: decided against ``bound`` (``_tail_decision``) unless it is NaN (no
bound), else ``bisect_width``. NaN with a MemoryError set where the parts cannot be held. */
static double tpot_tail(const TailClass *c, int n, double t_d, double tpot, double percentile, double bound) {
    double lam = 0.0;
    for (int i = 0; i < n; i++) lam += c[i].rate;
    if (lam <= 0 || percentile <= 50) return tpot;
    double ed2 = 0.0, ed3 = 0.0;
    int total = 0;
    for (int i = 0; i < n; i++) {
        double d = c[i].s - c[i].k * t_d;
        d = 0.0 > d ? 0.0 : d;
        ed2 += c[i].rate * pow(d, 2.0) * (1 + c[i].cv2);
        ed3 += c[i].rate * pow(d, 3.0) * pow(1 + c[i].cv2, 3.0);
        total += c[i].npts;
    }
    ed2 /= lam; ed3 /= lam;
    double ed2_15 = ed2 > 0 ? pow(ed2, 1.5) : 0.0;
    Part *parts = PyMem_Malloc(sizeof(Part) * (total + 1));
    if (parts == NULL) { PyErr_NoMemory(); return Py_NAN; }
    int np = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < c[i].npts; j++) {
            double k = c[i].o[j] - 1;
            if (k >= 1 && ed2 > 0) {
                double m = lam * k * tpot, g = ed3 / (sqrt(m) * ed2_15);
                Part q = {c[i].rate * c[i].w[j], sqrt(m * ed2) / k, 0.0, 0.0, g <= 1e-6};
                if (!q.normal) { q.a = 4.0 / (g * g); q.sqrt_a = sqrt(4.0 / (g * g)); }
                parts[np++] = q;
            }
        }
    double out = tpot;
    if (np > 0) {
        double wsum = lam, q = 1 - percentile / 100.0, top = parts[0].sd;
        for (int i = 1; i < np; i++) if (parts[i].sd > top) top = parts[i].sd;
        double lo = tpot, hi = tpot + 20 * top, width = 1e-4 * tpot;
        int decided = 0;
        if (!isnan(bound)) {
            decided = 1;
            if (bound < lo) out = Py_HUGE_VAL;
            else if (bound >= hi) out = tpot;
            else if (miss(parts, np, bound, tpot, wsum) > q) out = Py_HUGE_VAL;
            else if (bound - width >= lo && miss(parts, np, bound - width, tpot, wsum) <= q) out = tpot;
            else decided = 0;
        }
        if (!decided) {
            while (!(hi - lo <= width)) {
                double mid = (lo + hi) / 2;
                if (miss(parts, np, mid, tpot, wsum) > q) lo = mid; else hi = mid;
            }
            out = hi;
        }
    }
    PyMem_Free(parts);
    return out;
}

/* tpot_tail(classes, t_d, tpot, percentile, bound): ``trimtab.cost.queueing.tpot_tail`` (``classes``: (rate,
isl_cv2, prefill seconds, prefill steps, ((output length, share), ...)) each; ``bound``: None or seconds) */
PyObject *tail_of(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *classes, *bound_o;
    double t_d, tpot, percentile;
    if (!PyArg_ParseTuple(args, "O!dddO:tpot_tail", &PyTuple_Type, &classes, &t_d, &tpot, &percentile,
                          &bound_o))
        return NULL;
    if (gammaincc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tpot_tail: use_gammaincc first");
        return NULL;
    }
    double bound = bound_o == Py_None ? Py_NAN : PyFloat_AsDouble(bound_o);
    if (bound == -1.0 && PyErr_Occurred()) return NULL;
    int n = (int)PyTuple_GET_SIZE(classes), total = 0;
    PyObject *pts[n > 0 ? n : 1];
    TailClass *c = PyMem_Malloc(sizeof(TailClass) * (n + 1));
    if (c == NULL) return PyErr_NoMemory();
    for (int i = 0; i < n; i++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(classes, i), "ddddO!", &c[i].rate, &c[i].cv2, &c[i].s, &c[i].k,
                              &PyTuple_Type, &pts[i])) {
            PyMem_Free(c);
            return NULL;
        }
        c[i].npts = (int)PyTuple_GET_SIZE(pts[i]);
        total += c[i].npts;
    }
    double *ow = PyMem_Malloc(sizeof(double) * (2 * total + 1)), out = 0.0;
    PyObject *res = NULL;
    if (ow == NULL) {
        PyErr_NoMemory();
    } else {
        int at = 0, ok = 1;
        for (int i = 0; i < n && ok; i++) {
            c[i].o = ow + at; c[i].w = ow + total + at;
            for (int j = 0; j < c[i].npts && ok; j++, at++)
                ok = read_pair(PyTuple_GET_ITEM(pts[i], j), ow + at, ow + total + at);
        }
        if (ok) {
            out = tpot_tail(c, n, t_d, tpot, percentile, bound);
            if (!(isnan(out) && PyErr_Occurred())) res = PyFloat_FromDouble(out);
        }
        PyMem_Free(ow);
    }
    PyMem_Free(c);
    return res;
}

/* One class offered to one replica without a KV tier, as ``ReplicaModel._offer`` gives it: all that
``meets_at`` needs but the rate and the first batch */
typedef struct {
    double K, mns, cap, kv_cap, overhead, percentile, z, ttft_ms, tpot_ms;
    double new, cached, host, isl, osl, cv2, tail, tail_cached, reload_tail;
    int async_, prefix, max_iter, npts;
    double o[64], w[64];
} Offer;

static int read_offer(PyObject *t, Offer *f) {
    PyObject *points;
    if (!PyArg_ParseTuple(t, "dddddddddpdddddddddpiO!:offer", &f->K, &f->mns, &f->cap, &f->kv_cap,
                          &f->overhead, &f->percentile, &f->z, &f->ttft_ms, &f->tpot_ms, &f->async_, &f->new,
                          &f->cached, &f->host, &f->isl, &f->osl, &f->cv2, &f->tail, &f->tail_cached,
                          &f->reload_tail, &f->prefix, &f->max_iter, &PyTuple_Type, &points))
        return -1;
    if (gammaincc == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "decide: use_gammaincc first");
        return -1;
    }
    f->npts = (int)PyTuple_GET_SIZE(points);
    if (f->npts > 64) {
        PyErr_SetString(PyExc_ValueError, "decide: at most 64 output-length points");
        return -1;
    }
    for (int j = 0; j < f->npts; j++)
        if (!read_pair(PyTuple_GET_ITEM(points, j), f->o + j, f->w + j)) return -1;
    if (f->npts == 0) { f->o[0] = f->osl; f->w[0] = 1.0; f->npts = 1; }
    return 0;
}

/* ``ReplicaModel.meets_at`` at ``rate`` from the batch ``b0``: ``_offered``, ``evaluate`` in decision mode,
then ``meets``; 1 met, 0 not, -1 an exception set; the decode batch in ``*b_out`` */
static int decide_at(const Step *st, const Offer *f, double rate, double b0, double *b_out) {
    double K = f->K, mns = f->mns, osl = f->osl, isl = f->isl, cv2 = f->cv2, percentile = f->percentile;
    double D = 0.0 + rate * osl;
    double ctx = (0.0 + rate * osl * (isl + osl / 2)) / (1e-12 > D ? 1e-12 : D);
    double b = b0 < f->cap ? (0.0 > b0 ? 0.0 : b0) : 0.0;
    Offered c = {f->new, f->cached, f->host, rate};
    double sv, nsteps;
    Point p = fixed_point(st, K, mns, D, ctx, b, 1, f->cap, f->max_iter, &c, 1, &sv, &nsteps);
    if (p.status < 0) return -1;
    b = *b_out = p.b;
    if (p.status) return 0;
    double rho = p.rho, lam = c.rate;
    /* _prefill_queue */
    double es = 0.0 + c.rate * sv, es2 = 0.0 + c.rate * sv * sv * (1 + cv2), pre = 0.0 + c.rate * isl;
    es /= lam; es2 /= lam;
    double theta = es2 / (2 * es * (1 - rho)), q = 1 - percentile / 100.0;
    double wait_p = rho > q ? theta * log(rho / q) : 0.0;
    double ps = 1e-12 > p.steps_total ? 1e-12 : p.steps_total;
    double kv_used = b * ctx + rho * pre / ps;
    if (f->prefix)
        kv_used -= b * (0.0 + c.rate * osl * f->cached) / (1e-12 > D ? 1e-12 : D)
                   + rho * (0.0 + c.rate * f->cached) / ps;
    if (kv_used > f->kv_cap) return 0;
    double fe = f->async_ ? f->overhead + 1.5 * p.tpot : f->overhead;
    double ttft = fe + wait_p + prefill_s(st, K, f->tail, b, ctx, f->tail_cached) + f->reload_tail;
    int ttft_ok = ttft * 1e3 <= f->ttft_ms;
    if (percentile > 50 && b > 0 && ttft_ok) {
        /* the batch map's slope (map_slope), the seats and the KV at the percentile (over_caps) */
        double b2 = b + 0.01 * (b > 1.0 ? b : 1.0), slope = 1.0;
        if (!(K - b2 < 1)) {
            double rho2, steps2, s2, k2;
            if (offered_load(st, &c, 1, b2, K - b2, ctx, &rho2, &steps2, &s2, &k2)) return -1;
            if (rho2 < 1) {
                double f2 = D / (steps2 + (1 - rho2) / step_time(st, b2, ctx, 0.0, 0.0, 1.0, 0.0));
                slope = (f2 - b) / (b2 - p.b_in);
            }
        }
        double w = c.rate * osl;
        double num = 0.0 + w * (isl * isl * (1 + cv2) + isl * osl + osl * osl / 3), den = 0.0 + w;
        double x_sq = den > 0 ? num / den : 0.0, sl = slope > 0.0 ? slope : 0.0;
        double var = sl < 1.0 ? b / (1.0 - sl) : Py_HUGE_VAL;
        if (!isfinite(var)) return 0;
        if (b + f->z * sqrt(var) > mns) return 0;
        if (kv_used + f->z * sqrt(b * x_sq + (var - b) * ctx * ctx) > f->kv_cap) return 0;
    }
    TailClass tc = {c.rate, cv2, sv, nsteps, f->o, f->w, f->npts};
    double tpot_p = ttft_ok ? tpot_tail(&tc, 1, p.t_d, p.tpot, percentile, f->tpot_ms * 1e-3) : p.tpot;
    if (isnan(tpot_p) && PyErr_Occurred()) return -1;
    return ttft * 1e3 <= f->ttft_ms && tpot_p * 1e3 <= f->tpot_ms;
}

/* decide(offer, rate, b0): ``ReplicaModel.meets_at`` for one class without a KV tier: (met, decode batch) */
PyObject *step_decide(PyObject *self, PyObject *args) {
    PyObject *t;
    double rate, b0, b = 0.0;
    Offer f;
    if (!PyArg_ParseTuple(args, "O!dd:decide", &PyTuple_Type, &t, &rate, &b0) || read_offer(t, &f))
        return NULL;
    int met = decide_at((const Step *)self, &f, rate, b0, &b);
    if (met < 0) return NULL;
    return Py_BuildValue("(Od)", met ? Py_True : Py_False, b);
}

/* ``capacity_rps``'s search: the rates known to meet and to miss, the batch at the highest that met */
typedef struct { const Step *st; const Offer *f; double known0, known1, below; int error; } Search;

static int ok(Search *s, double rate) {
    if (rate <= s->known0 || rate >= s->known1) return rate <= s->known0;   /* implied by monotonicity */
    double b;
    int met = decide_at(s->st, s->f, rate, s->below, &b);
    if (met < 0) { s->error = 1; return 0; }
    if (met) {
        if (rate > s->known0) s->below = b;
        s->known0 = rate > s->known0 ? rate : s->known0;
    } else {
        s->known1 = rate < s->known1 ? rate : s->known1;
    }
    return met;
}

/* capacity(offer, rel_tol, guess, first_halvings): ``ReplicaModel.capacity_rps`` for a class the replica
holds, with ``trimtab.cost.search``'s ``bracket`` and ``bisect_max`` transcribed (its top: ``search_top``) */
PyObject *step_capacity(PyObject *self, PyObject *args) {
    PyObject *t, *guess_o;
    double rel_tol;
    int halvings;
    Offer f;
    if (!PyArg_ParseTuple(args, "O!dOi:capacity", &PyTuple_Type, &t, &rel_tol, &guess_o, &halvings)
        || read_offer(t, &f))
        return NULL;
    const Step *st = (const Step *)self;
    Search s = {st, &f, 0.0, Py_HUGE_VAL, 0.0, 0};
    double per_step = f.K < f.new ? f.K : f.new;
    double prefill_t = f.new / per_step * step_time(st, 0.0, 0.0, per_step, f.cached, 1.0, 0.0);
    double x = 1.0 / prefill_t, y = f.mns / (f.osl * step_time(st, 1.0, f.isl, 0.0, 0.0, 1.0, 0.0));
    double hi = (y < x ? y : x) * 1.01;
    if (guess_o != Py_None) {
        double guess = PyFloat_AsDouble(guess_o);
        if (guess == -1.0 && PyErr_Occurred()) return NULL;
        if (0.0 < guess && guess < hi) {   /* bracket(ok, guess, hi, rel_tol) */
            double step = 0.999 * rel_tol;
            if (ok(&s, guess)) {
                double lo = guess;
                for (;;) {
                    double r = lo * (1 + step);
                    if (r >= hi || !ok(&s, r) || s.error) break;
                    lo = r; step = step * 4;
                }
            } else if (!s.error) {
                double top = guess;
                for (;;) {
                    double r = top / (1 + step);
                    if (r < 1e-6 * guess || ok(&s, r) || s.error) break;
                    top = r; step = step * 4;
                }
            }
        }
    }
    double top = hi;
    for (int i = 0; i < halvings && !s.error; i++) {   /* the bisection's first points, while they miss */
        if (s.known0 > 0.0) break;
        top /= 2;
        ok(&s, top);
    }
    if (s.error) return NULL;
    if (s.known0 == 0.0 && !ok(&s, 1e-9)) return s.error ? NULL : PyFloat_FromDouble(0.0);
    double lo = 0.0;   /* bisect_max(ok, 0.0, hi, rel_tol) */
    while (!(hi - lo <= rel_tol * (1e-6 > lo ? 1e-6 : lo)) && !s.error) {
        double mid = (lo + hi) / 2;
        if (ok(&s, mid)) lo = mid; else hi = mid;
    }
    return s.error ? NULL : PyFloat_FromDouble(lo);
}

/* ``ReplicaRoles.evaluate_decode`` for one class at ``rate``, then its verdict on the TPOT SLO */
static int decode_meets(const Step *st, const double *a, double rate) {
    double mns = a[1], kv_cap = a[2], percentile = a[4], z = a[5], tpot_ms = a[7];
    double isl = a[9], osl = a[10], cv2 = a[12];
    double o1 = osl - 1, k = 0.0 > o1 ? 0.0 : o1;
    double D = 0.0 + rate * k;
    double ctx = (0.0 + rate * k * (isl + osl / 2)) / D;
    double b = 1.0, b_in = 1.0;
    for (int it = 0; it < 200; it++) {
        double b_new = D * step_time(st, b, ctx, 0.0, 0.0, 1.0, 0.0);
        if (b_new > mns) return 0;
        int done = fabs(b_new - b) <= 1e-4 * (1.0 > b_new ? 1.0 : b_new);
        b_in = b; b = b_new;
        if (done) break;
    }
    double kv_used = b * ctx, slope = 0.0;
    if (kv_used > kv_cap) return 0;
    if (percentile > 50) {   /* map_slope of f(x) = D x T_d(x) */
        double b2 = b + 0.01 * (b > 1.0 ? b : 1.0);
        slope = (D * step_time(st, b2, ctx, 0.0, 0.0, 1.0, 0.0) - b) / (b2 - b_in);
    }
    if (percentile > 50 && b > 0) {   /* over_caps */
        double w = rate * osl;
        double num = 0.0 + w * (isl * isl * (1 + cv2) + isl * osl + osl * osl / 3), den = 0.0 + w;
        double x_sq = den > 0 ? num / den : 0.0, sl = slope > 0.0 ? slope : 0.0;
        double var = sl < 1.0 ? b / (1.0 - sl) : Py_HUGE_VAL;
        if (!isfinite(var)) return 0;
        if (b + z * sqrt(var) > mns) return 0;
        if (kv_used + z * sqrt(b * x_sq + (var - b) * ctx * ctx) > kv_cap) return 0;
    }
    double b1 = 1.0 > b ? 1.0 : b;
    double tpot_p = step_time(st, b1, ctx, 0.0, 0.0, 1.0, 0.0);
    if (percentile > 50) {
        double sl = slope > 0.0 ? slope : 0.0;
        double var = sl < 1.0 ? b1 / (1.0 - sl) : Py_HUGE_VAL, n = b + z * sqrt(var);
        tpot_p = step_time(st, 1.0 > n ? 1.0 : n, ctx, 0.0, 0.0, 1.0, 0.0);
    }
    return tpot_p * 1e3 <= tpot_ms;
}

/* ``ReplicaRoles.prefill_meets``: ``evaluate_prefill`` for one class at ``rate``, then the TTFT SLO with the
KV hand-off */
static int prefill_meets(const Step *st, const double *a, double rate) {
    double K = a[0], overhead = a[3], percentile = a[4], ttft_ms = a[6], transfer_s = a[8];
    double isl = a[9], tail = a[11], cv2 = a[12];
    double per_step = K < isl ? K : isl, steps = isl / per_step;
    double t = step_time(st, 0.0, 0.0, per_step, (isl - per_step) / 2, 1.0, 0.0);
    double s = steps * t, lam = 0.0 + rate, rho = 0.0 + rate * steps * t;
    if (rho >= 1) return 0;
    double es = 0.0 + rate * s, es2 = 0.0 + rate * s * s * (1 + cv2);   /* _prefill_queue */
    es /= lam; es2 /= lam;
    double theta = es2 / (2 * es * (1 - rho)), q = 1 - percentile / 100.0;
    double wait_p = rho > q ? theta * log(rho / q) : 0.0;
    double ttft = overhead + wait_p + prefill_s(st, K, tail, 0.0, 0.0, 0.0);
    return (ttft + transfer_s) * 1e3 <= ttft_ms;
}

/* role_capacity(prefill, (K, max_num_seqs, KV cache tokens, request overhead, percentile, z, ttft_ms,
tpot_ms, transfer_s, isl, osl, tail, isl_cv2), rel_tol): ``ReplicaRoles.capacity_rps_role`` past its early
returns */
PyObject *step_role_capacity(PyObject *self, PyObject *args) {
    const Step *st = (const Step *)self;
    int prefill;
    double a[13], rel_tol;
    if (!PyArg_ParseTuple(args, "p(ddddddddddddd)d:role_capacity", &prefill, a, a + 1, a + 2, a + 3, a + 4,
                          a + 5, a + 6, a + 7, a + 8, a + 9, a + 10, a + 11, a + 12, &rel_tol))
        return NULL;
    double K = a[0], mns = a[1], isl = a[9], osl = a[10], hi;
    int (*ok)(const Step *, const double *, double) = prefill ? prefill_meets : decode_meets;
    if (prefill) {
        double per_step = K < isl ? K : isl;
        hi = 1.01 / (isl / per_step * step_time(st, 0.0, 0.0, per_step, 0.0, 1.0, 0.0));
    } else {
        hi = 1.01 * mns / ((osl - 1) * step_time(st, 1.0, isl, 0.0, 0.0, 1.0, 0.0));
    }
    if (!ok(st, a, 1e-9)) return PyFloat_FromDouble(0.0);
    double lo = 0.0;   /* bisect_max(ok, 0.0, hi, rel_tol) */
    while (!(hi - lo <= rel_tol * (1e-6 > lo ? 1e-6 : lo))) {
        double mid = (lo + hi) / 2;
        if (ok(st, a, mid)) lo = mid; else hi = mid;
    }
    return PyFloat_FromDouble(lo);
}
