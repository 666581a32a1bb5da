/* One engine step's time, compiled: ``trimtab.cost.step.ReplicaStep._step_py`` (the reference, with the
equations in ``iteration_s``'s docstring) transcribed term for term.

Why: the planner asks for a step time about three million times on a 100-workload spec (every capacity
search's fixed point, every simulated step with prompt tokens), and the interpreted function costs about
2.5 microseconds a call, a quarter of a plan's CPU. A ``Step`` holds the two folded term tuples of one replica
(``_step``, ``_step_graph``) and the eager all-reduce; calling it gives the reference's float to the last bit:
the same operations in the same order (left to right, as Python groups them), each rounded as Python rounds
it (built with -ffp-contract=off: no fused multiply-add), and the MoE block's three terms called as the
Python methods they are. tests/cost/test_step_kernel.py compares the two on every bundled model, layout and
argument range. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

/* the folded terms of ``ReplicaStep._fold``, in its tuple's order */
enum { A_W, A_ACT, A_FL, M_W, M_ACT, M_FL, KV_S, ATT_FL, ELEM, AR0, AR1, H_W, H_ACT, H_FL, HOP1, K2, KS, A_K,
       PLS, FIXED, KV_R, ATT_FL_P, PP, DP, NUM };

typedef struct {
    double v[NUM];
    PyObject *moe_compute, *moe_router, *moe_comm;   /* NULL for None */
} Fold;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Fold eager, graph;
    int has_ar; double ar_a, ar_b;   /* the eager all-reduce (fixed, per token) where tp > 1 */
    double limit;                    /* graph_tokens x pp: steps of at most this many tokens replay a graph */
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
    PyObject **m[3] = {&f->moe_compute, &f->moe_router, &f->moe_comm};
    for (int i = 0; i < 3; i++) {
        PyObject *o = PyTuple_GET_ITEM(t, NUM + i);
        *m[i] = o == Py_None ? NULL : o;
        Py_XINCREF(*m[i]);
    }
    return 0;
}

static int call1(PyObject *fn, double x, double *out) {
    PyObject *a = PyFloat_FromDouble(x);
    if (a == NULL) return -1;
    PyObject *r = PyObject_CallOneArg(fn, a);
    Py_DECREF(a);
    if (r == NULL) return -1;
    *out = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* ``_step_py``: the same statements, in its order */
static int step_time(Step *s, double decode_batch, double decode_ctx, double prefill_tokens,
                     double prefill_ctx, double prefill_seqs, double remote_share, double *out) {
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
    if (f->moe_compute != NULL) {
        double c, r, m = 0.0;
        if (call1(f->moe_compute, T, &c) || call1(f->moe_router, Ta, &r)) return -1;
        if (f->moe_comm == NULL) {
            t_mlp += c + r;
        } else {
            if (call1(f->moe_comm, T, &m)) return -1;
            t_mlp += c + r + m;
        }
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
    *out = v[PLS] * layer + stage_head + Ta * v[HOP1] + v[FIXED];
    return 0;
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
    double t;
    if (step_time((Step *)self, a[0], a[1], a[2], a[3], a[4], a[5], &t)) return NULL;
    return PyFloat_FromDouble(t);
}

static PyObject *step_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *eager, *graph, *ar;
    double limit;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Step takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOd:Step", &eager, &graph, &ar, &limit)) return NULL;
    Step *s = (Step *)type->tp_alloc(type, 0);
    if (s == NULL) return NULL;
    s->vectorcall = step_vectorcall;
    s->limit = limit;
    Py_INCREF(args);
    s->args = args;
    if (read_fold(eager, &s->eager) || read_fold(graph, &s->graph)) goto fail;
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
    Fold *f[2] = {&s->eager, &s->graph};
    for (int i = 0; i < 2; i++) {
        Py_XDECREF(f[i]->moe_compute);
        Py_XDECREF(f[i]->moe_router);
        Py_XDECREF(f[i]->moe_comm);
    }
    Py_XDECREF(s->args);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *step_reduce(Step *s, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(OO)", Py_TYPE(s), s->args);
}

static PyMethodDef step_methods[] = {
    {"__reduce__", (PyCFunction)step_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject StepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trimtab.cost._step.Step",
    .tp_basicsize = sizeof(Step),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Step(fold, fold_graph, allreduce_eager, graph_limit): a replica's iteration_s, compiled "
              "(trimtab.cost.step).",
    .tp_new = step_new,
    .tp_dealloc = (destructor)step_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Step, vectorcall),
    .tp_methods = step_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_step", NULL, -1, NULL};

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
