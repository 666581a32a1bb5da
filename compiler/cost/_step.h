/* Shared by compiler/cost/_step.c (the step time, its fixed point, the ``Step`` type) and
compiler/cost/_queue.c (the queueing tail and the capacity search's decision) of ``trimtab.cost._step``. */
#ifndef TRIMTAB_STEP_H
#define TRIMTAB_STEP_H
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

/* One class's prompts at decode batch b with ``chunk`` tokens a step left for them: ``load`` in
``ReplicaModel.evaluate`` (no KV tier): the prefill seconds and steps of one prompt, and the class's share of
the utilisation rho and of the prefill-carrying steps a second. -1 where Python divides by zero. */
typedef struct { double new, cached, host, rate; } Offered;

typedef struct { int status; double b, b_in, t_d, rho, steps_total, tpot, b_new; } Point;

double step_time(const Step *s, double decode_batch, double decode_ctx, double prefill_tokens,
                 double prefill_ctx, double prefill_seqs, double remote_share);
int offered_load(const Step *st, const Offered *c, Py_ssize_t n, double b, double chunk, double ctx,
                 double *rho, double *steps_total, double *sv, double *nsteps);
Point fixed_point(const Step *st, double K, double mns, double D, double ctx, double b, int on, double cap,
                  int max_iter, const Offered *c, Py_ssize_t n, double *sv, double *nsteps);
PyObject *use_gammaincc(PyObject *m, PyObject *capsule);
PyObject *tail_of(PyObject *m, PyObject *args);
PyObject *step_decide(PyObject *self, PyObject *args);
PyObject *step_capacity(PyObject *self, PyObject *args);
PyObject *step_role_capacity(PyObject *self, PyObject *args);
#endif
