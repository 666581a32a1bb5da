/* One engine step's time, compiled: ``trimtab.cost.step.ReplicaStep._step_py`` (the reference, with the
equations in ``iteration_s``'s docstring) transcribed term for term.

Why: the planner asks for a step time about three million times on a 100-workload spec (every capacity
search's fixed point, every simulated step with prompt tokens), and the interpreted function costs about
2.5 microseconds a call, a quarter of a plan's CPU. A ``Step`` holds the two folded term tuples of one replica
(``_step``, ``_step_graph``) and the eager all-reduce; calling it gives the reference's float to the last bit:
the same operations in the same order (left to right, as Python groups them), each rounded as Python rounds
it (built with -ffp-contract=off: no fused multiply-add), the MoE block's three terms included
(``MoeLayer.compute_s``, ``router_s``, ``comm_s`` over the constants of its ``kernel_terms``), and
``evaluate``'s decode-batch fixed point; the queueing side is in compiler/cost/_queue.c.
tests/cost/test_step_kernel.py compares the two on every bundled model, layout and argument range. */
#include "_step.h"

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
double step_time(const Step *s, double decode_batch, double decode_ctx, double prefill_tokens,
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

/* The loop of ``ReplicaModel.evaluate`` without a KV tier: the decode batch's fixed point b = D x TPOT(b)
with ``_Aitken``'s acceleration, the same iterates in the same order (its step and retreat transcribed
here). */
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

/* ``load`` in ``ReplicaModel.evaluate`` without a KV tier (``Offered``, _step.h) */
int offered_load(const Step *st, const Offered *c, Py_ssize_t n, double b, double chunk, double ctx,
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

/* The loop of ``evaluate``; status 0 converged; 1 no room for prompts; 2 prefill saturated; 3 batch limit;
4 no steady state; -1 an exception set. */
Point fixed_point(const Step *st, double K, double mns, double D, double ctx, double b, int on, double cap,
                  int max_iter, const Offered *c, Py_ssize_t n, double *sv, double *nsteps) {
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
        if (offered_load(st, c, n, b, chunk, ctx, &p.rho, &p.steps_total, sv, nsteps)) {
            p.status = -1;
            break;
        }
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
     "decide(offer, rate, b0): ReplicaModel.meets_at for one class without a KV tier: (met, decode batch)"},
    {"role_capacity", step_role_capacity, METH_VARARGS,
     "role_capacity(prefill, offer, rel_tol): ReplicaRoles.capacity_rps_role past its early returns"},
    {"capacity", step_capacity, METH_VARARGS,
     "capacity(offer, rel_tol, guess, first_halvings): ReplicaModel.capacity_rps for one class without a KV "
     "tier"},
    {"fixed_point", step_fixed_point, METH_VARARGS,
     "fixed_point(K, max_num_seqs, D, ctx_dec, b, accelerate, cap, max_iter, classes): "
     "the loop of ReplicaModel.evaluate without a KV tier (classes: (new, cached, reload_s, rate) each)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject StepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trimtab.cost._step.Step",
    .tp_basicsize = sizeof(Step),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Step(fold, fold_graph, allreduce_eager, graph_limit, moe_terms): a replica's iteration_s, "
              "compiled (trimtab.cost.step).",
    .tp_new = step_new,
    .tp_dealloc = (destructor)step_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Step, vectorcall),
    .tp_methods = step_methods,
};

static PyMethodDef module_methods[] = {
    {"tpot_tail", tail_of, METH_VARARGS,
     "tpot_tail(classes, t_d, tpot, percentile, bound): trimtab.cost.queueing.tpot_tail, compiled"},
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
